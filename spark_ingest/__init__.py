"""Batch ingestion of Sluice's tiered segments (S3) into hourly Parquet with PySpark.

`spark.read.format("sluice")` reads the segments named by the partition manifests; the job
(`python -m spark_ingest`) writes them as Parquet under deterministic names, exactly once.
This package imports only engine's batch format, boto3, pyarrow, pyspark and rich (progress).
"""
