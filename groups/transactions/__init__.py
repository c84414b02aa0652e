"""Transactions (KIP-98, KIP-447, KIP-890): the transaction coordinator's state machine, the
`__transaction_state` topic and the coordinator that serves them (domain code, no HTTP)."""
