"""The pipelines' shared fixture: Beam's Prism runner made to record any attempt to use it."""

import pytest


@pytest.fixture
def prism_attempts(monkeypatch):
    """A list that grows by one for every pipeline handed to Beam's Prism runner (which would
    download its binary at run time); the attempt then fails, as it does without a network."""
    from apache_beam.runners.portability import prism_runner

    tried = []

    def record(self, *args, **kwargs):
        tried.append(args)
        raise RuntimeError("Prism was tried")

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", record)
    return tried
