"""Authentication (API keys, JWT, HTTP Basic, mutual TLS) and Kafka's ACL authorization."""
