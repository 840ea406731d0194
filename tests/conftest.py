import pytest

from tests.helpers import build_tiny_model


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: real-model or real-launcher runs (seconds to minutes)")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny_model")))
