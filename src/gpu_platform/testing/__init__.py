"""Public test harness: in-memory fakes for every outbound port, hypothesis strategies and
contract suites that real adapters and fakes both pass."""
