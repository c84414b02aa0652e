"""JSON Schema compatibility over the schema registry's API against a real gateway process:
each case registers the writer (older) schema under a fresh subject, sets the subject's level
to BACKWARD and registers the reader (newer) one, which must be accepted with a new id, or
refused. Ported to plain HTTP from Karapace's (Apache-2.0)
tests/integration/test_jsonschema.py: all 22 of its tests, the 21 compatibility tests as one
table (CASES, each row naming its Karapace test) and test_same_jsonschema_must_have_same_id.

The schemas are those of Karapace's tests/schemas/json_schemas.py, as
tests/schemas/test_json_schema.py ports them (KARAPACE_SCHEMAS), and the answers follow that
module's conclusions: where it lists a pair in DIVERGENCES, Sluice answers the opposite of
Karapace here too. One more group, from test_schemaregistry_true_schema_is_compatible_with_object:
Karapace calls a `true` reader incompatible with every writer that is not an object schema;
a `true` reader reads every value, and Confluent's checker passes any change to an empty or
`true` schema, so Sluice calls them compatible (TRUE_READS_EVERYTHING).

Karapace's lines commented out in its tests are not cases and are not ported.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import pytest

from tests.schemas.test_json_schema import DIVERGENCES, KARAPACE_SCHEMAS

V1 = "application/vnd.schemaregistry.v1+json"
_names = itertools.count()

# Karapace's json_schemas.py groups.
OBJECT_SCHEMAS = (
    "A_DINT_B_DINT_OBJECT_SCHEMA",
    "A_DINT_B_INT_OBJECT_SCHEMA",
    "A_DINT_B_NUM_C_DINT_OBJECT_SCHEMA",
    "A_DINT_B_NUM_OBJECT_SCHEMA",
    "A_DINT_OBJECT_SCHEMA",
    "A_INT_B_DINT_OBJECT_SCHEMA",
    "A_INT_B_DINT_REQUIRED_OBJECT_SCHEMA",
    "A_INT_B_INT_OBJECT_SCHEMA",
    "A_INT_B_INT_REQUIRED_OBJECT_SCHEMA",
    "A_INT_OBJECT_SCHEMA",
    "A_INT_OPEN_OBJECT_SCHEMA",
    "A_OBJECT_SCHEMA",
    "B_DINT_OPEN_OBJECT_SCHEMA",
    "B_INT_OBJECT_SCHEMA",
    "B_INT_OPEN_OBJECT_SCHEMA",
    "B_NUM_C_DINT_OPEN_OBJECT_SCHEMA",
    "B_NUM_C_INT_OBJECT_SCHEMA",
    "B_NUM_C_INT_OPEN_OBJECT_SCHEMA",
    "EMPTY_OBJECT_SCHEMA",
    "EMPTY_SCHEMA",
    "EVERY_TYPE_SCHEMA",
    "MAX_PROPERTIES_SCHEMA",
    "MAX_PROPERTIES_DECREASED_SCHEMA",
    "MIN_PROPERTIES_SCHEMA",
    "MIN_PROPERTIES_INCREASED_SCHEMA",
    "OBJECT_SCHEMA",
    "PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA",
    "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA",
)
BOOLEAN_SCHEMAS = ("TRUE_SCHEMA", "FALSE_SCHEMA")
NON_OBJECT_SCHEMAS = (
    "BOOLEAN_SCHEMA",
    "ARRAY_OF_INT_SCHEMA",
    "ARRAY_OF_NUMBER_SCHEMA",
    "ARRAY_OF_POSITIVE_INTEGER",
    "ARRAY_OF_POSITIVE_INTEGER_THROUGH_REF",
    "ARRAY_OF_STRING_SCHEMA",
    "ARRAY_SCHEMA",
    "ENUM_AB_SCHEMA",
    "ENUM_ABC_SCHEMA",
    "ENUM_BC_SCHEMA",
    "EXCLUSIVE_MAXIMUM_DECREASED_INTEGER_SCHEMA",
    "EXCLUSIVE_MAXIMUM_DECREASED_NUMBER_SCHEMA",
    "EXCLUSIVE_MAXIMUM_INTEGER_SCHEMA",
    "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA",
    "EXCLUSIVE_MINIMUM_INCREASED_INTEGER_SCHEMA",
    "EXCLUSIVE_MINIMUM_INCREASED_NUMBER_SCHEMA",
    "EXCLUSIVE_MINIMUM_INTEGER_SCHEMA",
    "EXCLUSIVE_MINIMUM_NUMBER_SCHEMA",
    "INT_SCHEMA",
    "MAX_ITEMS_DECREASED_SCHEMA",
    "MAX_ITEMS_SCHEMA",
    "MAX_LENGTH_DECREASED_SCHEMA",
    "MAX_LENGTH_SCHEMA",
    "MAXIMUM_DECREASED_INTEGER_SCHEMA",
    "MAXIMUM_DECREASED_NUMBER_SCHEMA",
    "MAXIMUM_INTEGER_SCHEMA",
    "MAXIMUM_NUMBER_SCHEMA",
    "MIN_ITEMS_INCREASED_SCHEMA",
    "MIN_ITEMS_SCHEMA",
    "MIN_LENGTH_INCREASED_SCHEMA",
    "MIN_LENGTH_SCHEMA",
    "MIN_PATTERN_SCHEMA",
    "MIN_PATTERN_STRICT_SCHEMA",
    "MINIMUM_INCREASED_INTEGER_SCHEMA",
    "MINIMUM_INCREASED_NUMBER_SCHEMA",
    "MINIMUM_INTEGER_SCHEMA",
    "MINIMUM_NUMBER_SCHEMA",
    "NOT_ARRAY_SCHEMA",
    "NOT_BOOLEAN_SCHEMA",
    "NOT_INT_SCHEMA",
    "NOT_NUMBER_SCHEMA",
    "NOT_OBJECT_SCHEMA",
    "NOT_OF_EMPTY_SCHEMA",
    "NOT_OF_TRUE_SCHEMA",
    "NOT_STRING_SCHEMA",
    "NUMBER_SCHEMA",
    "ONEOF_ARRAY_A_DINT_B_NUM_SCHEMA",
    "ONEOF_ARRAY_B_NUM_C_DINT_OPEN_SCHEMA",
    "ONEOF_ARRAY_B_NUM_C_INT_SCHEMA",
    "ONEOF_INT_SCHEMA",
    "ONEOF_NUMBER_SCHEMA",
    "ONEOF_STRING_INT_SCHEMA",
    "ONEOF_STRING_SCHEMA",
    "STRING_SCHEMA",
    "TUPLE_OF_INT_INT_OPEN_SCHEMA",
    "TUPLE_OF_INT_INT_SCHEMA",
    "TUPLE_OF_INT_OPEN_SCHEMA",
    "TUPLE_OF_INT_SCHEMA",
    "TUPLE_OF_INT_WITH_ADDITIONAL_INT_SCHEMA",
    "TYPES_STRING_INT_SCHEMA",
    "TYPES_STRING_SCHEMA",
)
ALL_SCHEMAS = OBJECT_SCHEMAS + BOOLEAN_SCHEMAS + NON_OBJECT_SCHEMAS

# (Karapace's test, reader (newer), writer (older), Karapace's answer: compatible), in the
# order of its calls.
CASES: list[tuple[str, str, str, bool]] = [
    (
        "schemaregistry_schemaregistry_extra_optional_field_with_open_model_is_compatible",
        "OBJECT_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schemaregistry_extra_optional_field_with_open_model_is_compatible",
        "TRUE_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schemaregistry_extra_optional_field_with_open_model_is_compatible",
        "EMPTY_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schemaregistry_extra_optional_field_with_open_model_is_compatible",
        "B_INT_OPEN_OBJECT_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schemaregistry_extra_optional_field_with_open_model_is_compatible",
        "A_INT_B_INT_OBJECT_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schemaregistry_extra_optional_field_with_open_model_is_compatible",
        "A_DINT_B_NUM_C_DINT_OBJECT_SCHEMA",
        "A_DINT_B_NUM_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schemaregistry_extra_optional_field_with_open_model_is_compatible",
        "B_NUM_C_DINT_OPEN_OBJECT_SCHEMA",
        "A_DINT_B_NUM_C_DINT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schemaregistry_extra_optional_field_with_open_model_is_compatible",
        "B_NUM_C_INT_OPEN_OBJECT_SCHEMA",
        "A_DINT_B_NUM_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schemaregistry_extra_optional_field_with_open_model_is_compatible",
        "B_NUM_C_DINT_OPEN_OBJECT_SCHEMA",
        "A_DINT_B_NUM_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schemaregistry_extra_field_with_closed_model_is_incompatible",
        "A_INT_OBJECT_SCHEMA",
        "FALSE_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schemaregistry_extra_field_with_closed_model_is_incompatible",
        "NOT_OF_TRUE_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schemaregistry_extra_field_with_closed_model_is_incompatible",
        "NOT_OF_EMPTY_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schemaregistry_extra_field_with_closed_model_is_incompatible",
        "B_INT_OBJECT_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schemaregistry_extra_field_with_closed_model_is_incompatible",
        "B_NUM_C_INT_OBJECT_SCHEMA",
        "A_DINT_B_NUM_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schemaregistry_extra_field_with_closed_model_is_incompatible",
        "B_NUM_C_INT_OBJECT_SCHEMA",
        "A_DINT_B_NUM_C_DINT_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schemaregistry_missing_required_field_is_incompatible",
        "A_INT_B_INT_REQUIRED_OBJECT_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schemaregistry_missing_required_field_is_incompatible",
        "A_INT_OBJECT_SCHEMA",
        "A_INT_B_DINT_REQUIRED_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_giving_a_default_value_for_a_non_required_field_is_compatible",
        "OBJECT_SCHEMA",
        "A_DINT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_giving_a_default_value_for_a_non_required_field_is_compatible",
        "TRUE_SCHEMA",
        "A_DINT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_giving_a_default_value_for_a_non_required_field_is_compatible",
        "EMPTY_SCHEMA",
        "A_DINT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_giving_a_default_value_for_a_non_required_field_is_compatible",
        "B_DINT_OPEN_OBJECT_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_giving_a_default_value_for_a_non_required_field_is_compatible",
        "A_INT_B_DINT_OBJECT_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_giving_a_default_value_for_a_non_required_field_is_compatible",
        "A_DINT_B_INT_OBJECT_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_giving_a_default_value_for_a_non_required_field_is_compatible",
        "B_NUM_C_DINT_OPEN_OBJECT_SCHEMA",
        "A_DINT_B_NUM_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_giving_a_default_value_for_a_non_required_field_is_compatible",
        "A_DINT_B_DINT_OBJECT_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_giving_a_default_value_for_a_non_required_field_is_compatible",
        "A_DINT_B_DINT_OBJECT_SCHEMA",
        "EMPTY_OBJECT_SCHEMA",
        True,
    ),
    ("schemaregistry_boolean_schemas_are_backward_compatible", "TRUE_SCHEMA", "FALSE_SCHEMA", True),
    ("schemaregistry_boolean_schemas_are_backward_compatible", "FALSE_SCHEMA", "TRUE_SCHEMA", True),
    (
        "schemaregistry_from_closed_to_open_is_incompatible",
        "B_NUM_C_INT_OBJECT_SCHEMA",
        "B_NUM_C_DINT_OPEN_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_union_with_incompatible_elements",
        "ONEOF_ARRAY_B_NUM_C_INT_SCHEMA",
        "ONEOF_ARRAY_A_DINT_B_NUM_SCHEMA",
        False,
    ),
    (
        "schemaregistry_union_with_compatible_elements",
        "ONEOF_ARRAY_B_NUM_C_DINT_OPEN_SCHEMA",
        "ONEOF_ARRAY_A_DINT_B_NUM_SCHEMA",
        True,
    ),
    (
        "schemaregistry_array_and_tuples_are_incompatible",
        "TUPLE_OF_INT_OPEN_SCHEMA",
        "ARRAY_OF_INT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_array_and_tuples_are_incompatible",
        "ARRAY_OF_INT_SCHEMA",
        "TUPLE_OF_INT_OPEN_SCHEMA",
        False,
    ),
    ("schemaregistry_schema_compatibility_successes", "NUMBER_SCHEMA", "INT_SCHEMA", True),
    (
        "schemaregistry_schema_compatibility_successes",
        "ARRAY_OF_NUMBER_SCHEMA",
        "ARRAY_OF_INT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_compatibility_successes",
        "TUPLE_OF_INT_OPEN_SCHEMA",
        "TUPLE_OF_INT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_compatibility_successes",
        "TUPLE_OF_INT_WITH_ADDITIONAL_INT_SCHEMA",
        "TUPLE_OF_INT_SCHEMA",
        True,
    ),
    ("schemaregistry_schema_compatibility_successes", "ENUM_ABC_SCHEMA", "ENUM_AB_SCHEMA", True),
    (
        "schemaregistry_schema_compatibility_successes",
        "ONEOF_STRING_INT_SCHEMA",
        "ONEOF_STRING_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_compatibility_successes",
        "ONEOF_STRING_INT_SCHEMA",
        "STRING_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_compatibility_successes",
        "A_INT_OPEN_OBJECT_SCHEMA",
        "A_INT_B_INT_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_compatibility_successes",
        "TUPLE_OF_INT_OPEN_SCHEMA",
        "TUPLE_OF_INT_INT_OPEN_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_compatibility_successes",
        "TUPLE_OF_INT_OPEN_SCHEMA",
        "TUPLE_OF_INT_INT_SCHEMA",
        True,
    ),
    ("schemaregistry_schema_compatibility_successes", "ONEOF_STRING_SCHEMA", "STRING_SCHEMA", True),
    ("schemaregistry_schema_compatibility_successes", "STRING_SCHEMA", "ONEOF_STRING_SCHEMA", True),
    (
        "schemaregistry_schema_compatibility_successes",
        "A_INT_OBJECT_SCHEMA",
        "EMPTY_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_compatibility_successes",
        "A_INT_B_INT_OBJECT_SCHEMA",
        "A_INT_OBJECT_SCHEMA",
        True,
    ),
    ("schemaregistry_type_narrowing_incompabilities", "INT_SCHEMA", "NUMBER_SCHEMA", False),
    (
        "schemaregistry_type_narrowing_incompabilities",
        "ARRAY_OF_INT_SCHEMA",
        "ARRAY_OF_NUMBER_SCHEMA",
        False,
    ),
    ("schemaregistry_type_narrowing_incompabilities", "ENUM_AB_SCHEMA", "ENUM_ABC_SCHEMA", False),
    ("schemaregistry_type_narrowing_incompabilities", "ENUM_BC_SCHEMA", "ENUM_ABC_SCHEMA", False),
    (
        "schemaregistry_type_narrowing_incompabilities",
        "ONEOF_INT_SCHEMA",
        "ONEOF_NUMBER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_type_narrowing_incompabilities",
        "ONEOF_STRING_SCHEMA",
        "ONEOF_STRING_INT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_type_narrowing_incompabilities",
        "INT_SCHEMA",
        "ONEOF_STRING_INT_SCHEMA",
        False,
    ),
    ("schemaregistry_type_mismatch_incompabilities", "BOOLEAN_SCHEMA", "INT_SCHEMA", False),
    ("schemaregistry_type_mismatch_incompabilities", "INT_SCHEMA", "BOOLEAN_SCHEMA", False),
    ("schemaregistry_type_mismatch_incompabilities", "STRING_SCHEMA", "BOOLEAN_SCHEMA", False),
    ("schemaregistry_type_mismatch_incompabilities", "STRING_SCHEMA", "INT_SCHEMA", False),
    (
        "schemaregistry_type_mismatch_incompabilities",
        "ARRAY_OF_INT_SCHEMA",
        "ARRAY_OF_STRING_SCHEMA",
        False,
    ),
    (
        "schemaregistry_type_mismatch_incompabilities",
        "TUPLE_OF_INT_INT_SCHEMA",
        "TUPLE_OF_INT_OPEN_SCHEMA",
        False,
    ),
    (
        "schemaregistry_type_mismatch_incompabilities",
        "TUPLE_OF_INT_INT_OPEN_SCHEMA",
        "TUPLE_OF_INT_OPEN_SCHEMA",
        False,
    ),
    ("schemaregistry_type_mismatch_incompabilities", "INT_SCHEMA", "ENUM_AB_SCHEMA", False),
    ("schemaregistry_type_mismatch_incompabilities", "ENUM_AB_SCHEMA", "INT_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "NOT_OF_TRUE_SCHEMA", "NOT_OF_EMPTY_SCHEMA", True),
    ("schemaregistry_true_and_false_schemas", "EMPTY_SCHEMA", "TRUE_SCHEMA", True),
    ("schemaregistry_true_and_false_schemas", "NOT_OF_EMPTY_SCHEMA", "TRUE_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "NOT_OF_TRUE_SCHEMA", "TRUE_SCHEMA", False),
    (
        "schemaregistry_true_and_false_schemas",
        "A_INT_B_INT_REQUIRED_OBJECT_SCHEMA",
        "TRUE_SCHEMA",
        False,
    ),
    (
        "schemaregistry_true_and_false_schemas",
        "A_INT_B_INT_REQUIRED_OBJECT_SCHEMA",
        "FALSE_SCHEMA",
        False,
    ),
    ("schemaregistry_true_and_false_schemas", "FALSE_SCHEMA", "NOT_OF_TRUE_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "NOT_OF_TRUE_SCHEMA", "FALSE_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "NOT_OF_EMPTY_SCHEMA", "FALSE_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "FALSE_SCHEMA", "NOT_OF_EMPTY_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "NOT_OF_EMPTY_SCHEMA", "TRUE_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "TRUE_SCHEMA", "NOT_OF_EMPTY_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "NOT_OF_TRUE_SCHEMA", "TRUE_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "TRUE_SCHEMA", "NOT_OF_TRUE_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "NOT_OF_EMPTY_SCHEMA", "TRUE_SCHEMA", False),
    ("schemaregistry_true_and_false_schemas", "TRUE_SCHEMA", "NOT_OF_EMPTY_SCHEMA", False),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAX_LENGTH_SCHEMA",
        "STRING_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAX_LENGTH_DECREASED_SCHEMA",
        "MAX_LENGTH_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MIN_LENGTH_SCHEMA",
        "STRING_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MIN_LENGTH_INCREASED_SCHEMA",
        "MIN_LENGTH_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MIN_PATTERN_SCHEMA",
        "STRING_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MIN_PATTERN_STRICT_SCHEMA",
        "MIN_PATTERN_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAXIMUM_INTEGER_SCHEMA",
        "INT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAXIMUM_NUMBER_SCHEMA",
        "INT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAXIMUM_NUMBER_SCHEMA",
        "NUMBER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAXIMUM_DECREASED_NUMBER_SCHEMA",
        "MAXIMUM_NUMBER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAXIMUM_DECREASED_INTEGER_SCHEMA",
        "MAXIMUM_INTEGER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MINIMUM_NUMBER_SCHEMA",
        "INT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MINIMUM_NUMBER_SCHEMA",
        "NUMBER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MINIMUM_INCREASED_NUMBER_SCHEMA",
        "MINIMUM_NUMBER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MINIMUM_INCREASED_INTEGER_SCHEMA",
        "MINIMUM_INTEGER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA",
        "INT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA",
        "NUMBER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "EXCLUSIVE_MAXIMUM_DECREASED_NUMBER_SCHEMA",
        "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "EXCLUSIVE_MAXIMUM_DECREASED_INTEGER_SCHEMA",
        "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "EXCLUSIVE_MINIMUM_NUMBER_SCHEMA",
        "NUMBER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "EXCLUSIVE_MINIMUM_NUMBER_SCHEMA",
        "INT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "EXCLUSIVE_MINIMUM_INCREASED_NUMBER_SCHEMA",
        "EXCLUSIVE_MINIMUM_NUMBER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "EXCLUSIVE_MINIMUM_INCREASED_INTEGER_SCHEMA",
        "EXCLUSIVE_MINIMUM_INTEGER_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAX_PROPERTIES_SCHEMA",
        "OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAX_PROPERTIES_DECREASED_SCHEMA",
        "MAX_PROPERTIES_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MIN_PROPERTIES_SCHEMA",
        "OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MIN_PROPERTIES_INCREASED_SCHEMA",
        "MIN_PROPERTIES_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAX_ITEMS_SCHEMA",
        "ARRAY_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MAX_ITEMS_DECREASED_SCHEMA",
        "MAX_ITEMS_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MIN_ITEMS_SCHEMA",
        "ARRAY_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_restrict_attributes_is_incompatible",
        "MIN_ITEMS_INCREASED_SCHEMA",
        "MIN_ITEMS_SCHEMA",
        False,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "STRING_SCHEMA",
        "MAX_LENGTH_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "MAX_LENGTH_SCHEMA",
        "MAX_LENGTH_DECREASED_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "STRING_SCHEMA",
        "MIN_LENGTH_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "MIN_LENGTH_SCHEMA",
        "MIN_LENGTH_INCREASED_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "STRING_SCHEMA",
        "MIN_PATTERN_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "INT_SCHEMA",
        "MAXIMUM_INTEGER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "NUMBER_SCHEMA",
        "MAXIMUM_NUMBER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "MAXIMUM_NUMBER_SCHEMA",
        "MAXIMUM_DECREASED_NUMBER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "INT_SCHEMA",
        "MINIMUM_INTEGER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "NUMBER_SCHEMA",
        "MINIMUM_NUMBER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "MINIMUM_NUMBER_SCHEMA",
        "MINIMUM_INCREASED_NUMBER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "INT_SCHEMA",
        "EXCLUSIVE_MAXIMUM_INTEGER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "NUMBER_SCHEMA",
        "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "EXCLUSIVE_MAXIMUM_NUMBER_SCHEMA",
        "EXCLUSIVE_MAXIMUM_DECREASED_NUMBER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "NUMBER_SCHEMA",
        "EXCLUSIVE_MINIMUM_NUMBER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "INT_SCHEMA",
        "EXCLUSIVE_MINIMUM_INTEGER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "EXCLUSIVE_MINIMUM_NUMBER_SCHEMA",
        "EXCLUSIVE_MINIMUM_INCREASED_NUMBER_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "OBJECT_SCHEMA",
        "MAX_PROPERTIES_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "MAX_PROPERTIES_SCHEMA",
        "MAX_PROPERTIES_DECREASED_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "OBJECT_SCHEMA",
        "MIN_PROPERTIES_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "MIN_PROPERTIES_SCHEMA",
        "MIN_PROPERTIES_INCREASED_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "ARRAY_SCHEMA",
        "MAX_ITEMS_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "MAX_ITEMS_SCHEMA",
        "MAX_ITEMS_DECREASED_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "ARRAY_SCHEMA",
        "MIN_ITEMS_SCHEMA",
        True,
    ),
    (
        "schemaregistry_schema_broadenning_attributes_is_compatible",
        "MIN_ITEMS_SCHEMA",
        "MIN_ITEMS_INCREASED_SCHEMA",
        True,
    ),
    (
        "schemaregistry_pattern_properties",
        "OBJECT_SCHEMA",
        "PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_pattern_properties",
        "A_OBJECT_SCHEMA",
        "PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_pattern_properties",
        "PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA",
        "A_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_pattern_properties",
        "A_INT_OBJECT_SCHEMA",
        "PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_pattern_properties",
        "B_INT_OBJECT_SCHEMA",
        "PATTERN_PROPERTY_ASTAR_OBJECT_SCHEMA",
        False,
    ),
    ("schemaregistry_object_properties", "A_OBJECT_SCHEMA", "OBJECT_SCHEMA", False),
    ("schemaregistry_object_properties", "OBJECT_SCHEMA", "A_OBJECT_SCHEMA", True),
    ("schemaregistry_object_properties", "A_INT_OBJECT_SCHEMA", "OBJECT_SCHEMA", False),
    ("schemaregistry_object_properties", "B_INT_OBJECT_SCHEMA", "OBJECT_SCHEMA", False),
    ("schemaregistry_property_names", "OBJECT_SCHEMA", "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA", True),
    (
        "schemaregistry_property_names",
        "A_OBJECT_SCHEMA",
        "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_property_names",
        "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA",
        "A_OBJECT_SCHEMA",
        True,
    ),
    (
        "schemaregistry_property_names",
        "A_INT_OBJECT_SCHEMA",
        "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA",
        False,
    ),
    (
        "schemaregistry_property_names",
        "PROPERTY_NAMES_ASTAR_OBJECT_SCHEMA",
        "B_INT_OBJECT_SCHEMA",
        True,
    ),
    ("schemaregistry_type_with_list", "STRING_SCHEMA", "TYPES_STRING_SCHEMA", True),
    ("schemaregistry_type_with_list", "TYPES_STRING_INT_SCHEMA", "TYPES_STRING_SCHEMA", True),
    (
        "schemaregistry_ref",
        "ARRAY_OF_POSITIVE_INTEGER",
        "ARRAY_OF_POSITIVE_INTEGER_THROUGH_REF",
        True,
    ),
    (
        "schemaregistry_ref",
        "ARRAY_OF_POSITIVE_INTEGER_THROUGH_REF",
        "ARRAY_OF_POSITIVE_INTEGER",
        True,
    ),
    # test_schemaregistry_true_schema_is_compatible_with_object's two loops
    *(
        ("schemaregistry_true_schema_is_compatible_with_object", "TRUE_SCHEMA", writer, True)
        for writer in OBJECT_SCHEMAS + BOOLEAN_SCHEMAS
        if writer != "TRUE_SCHEMA"
    ),
    *(
        ("schemaregistry_true_schema_is_compatible_with_object", "TRUE_SCHEMA", writer, False)
        for writer in NON_OBJECT_SCHEMAS
    ),
]
TRUE_READS_EVERYTHING = {("TRUE_SCHEMA", writer) for writer in NON_OBJECT_SCHEMAS}


def sluice_answer(reader: str, writer: str, karapace: bool) -> bool:
    """Karapace's answer, but for the pairs where Sluice answers otherwise on purpose."""
    return not karapace if (reader, writer) in DIVERGENCES | TRUE_READS_EVERYTHING else karapace


def post(c: httpx.Client, path: str, body: object) -> httpx.Response:
    return c.post(path, content=json.dumps(body), headers={"Content-Type": V1})


def json_schema(name: str, **extra: Any) -> dict[str, Any]:
    return {"schema": json.dumps(KARAPACE_SCHEMAS[name]), "schemaType": "JSON", **extra}


@pytest.mark.parametrize(
    ("karapace_test", "reader", "writer", "karapace"),
    CASES,
    ids=[f"{test}:{reader}<-{writer}" for test, reader, writer, _ in CASES],
)
def test_backward_compatibility_through_the_api(
    sr: httpx.Client, karapace_test: str, reader: str, writer: str, karapace: bool
) -> None:
    """Karapace's test_<karapace_test> (its schemas_are_backward_compatible and
    not_schemas_are_backward_compatible): the writer registers under a fresh subject at
    BACKWARD; the reader is then accepted with another id, or refused as incompatible (409)."""
    subject = f"subject-{next(_names)}"
    assert sr.get(f"/subjects/{subject}/versions").status_code == 404
    older = post(sr, f"/subjects/{subject}/versions", json_schema(writer))
    assert older.status_code == 200, older.text
    level = sr.put(
        f"/config/{subject}",
        content=json.dumps({"compatibility": "BACKWARD"}),
        headers={"Content-Type": V1},
    )
    assert level.status_code == 200, level.text
    newer = post(sr, f"/subjects/{subject}/versions", json_schema(reader))
    if sluice_answer(reader, writer, karapace):
        assert newer.status_code == 200, newer.text
        assert newer.json()["id"] != older.json()["id"]
    else:
        assert newer.status_code == 409, newer.text
        assert newer.json()["error_code"] == 409
    config = sr.get(f"/config/{subject}", params={"defaultToGlobal": "true"}).json()
    assert config["compatibilityLevel"] == "BACKWARD"


@pytest.mark.parametrize("compatibility", ["FORWARD", "BACKWARD", "FULL"])
@pytest.mark.parametrize("metadata", [None, {}])
@pytest.mark.parametrize("rule_set", [None, {}])
def test_same_jsonschema_must_have_same_id(
    sr: httpx.Client,
    compatibility: str,
    metadata: dict[str, Any] | None,
    rule_set: dict[str, Any] | None,
) -> None:
    """Karapace's test_same_jsonschema_must_have_same_id: every schema registered twice under
    a subject at the level answers the same id (`metadata` and `ruleSet` null or empty:
    accepted and dropped)."""
    for name in ALL_SCHEMAS:
        subject = f"subject-{next(_names)}"
        level = sr.put(
            f"/config/{subject}",
            content=json.dumps({"compatibility": compatibility}),
            headers={"Content-Type": V1},
        )
        assert level.status_code == 200, level.text
        body = json_schema(name, metadata=metadata, ruleSet=rule_set)
        first = post(sr, f"/subjects/{subject}/versions", body)
        assert first.status_code == 200, first.text
        assert first.json()["id"]
        second = post(sr, f"/subjects/{subject}/versions", body)
        assert second.status_code == 200 and second.json()["id"] == first.json()["id"]
