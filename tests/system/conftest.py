from tests.integration.conftest import server_factory

__all__ = ["server_factory"]
