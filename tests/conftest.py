import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.helpers import build_tiny_model  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: real-model or real-launcher runs (seconds to minutes)")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny_model")))
