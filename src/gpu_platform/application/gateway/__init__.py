"""The OpenAI-compatible gateway's decisions, free of HTTP: which replica takes a request
(`routing`), whether a key may send one now (`limits`), and what each tenant used (`ledger`).
The HTTP side is `adapters/inbound/gateway`."""
