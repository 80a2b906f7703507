"""The sandbox backends a test runs on: bwrap always, docker when an engine and the image are here."""

import pytest

from services.config import PROJECT_ROOT, SandboxConfig

# Labelled rows an agent must never read: the attacks look for them from inside a sandbox.
VAL_LABELS = PROJECT_ROOT / "domains" / "imo" / "data" / "gradingbench_filtered_100_val.csv"


def docker_ready() -> str | None:
    """Why the docker backend cannot run here, or None when it can."""
    try:
        from services.sandbox.docker_backend import engine_available
    except ImportError as e:
        return str(e)
    problem = engine_available(SandboxConfig())
    if problem:
        return problem
    import docker

    try:
        docker.from_env().images.get(SandboxConfig().docker_image)
    except Exception:
        return f"image {SandboxConfig().docker_image} is not built"
    return None


# For @pytest.mark.parametrize("backend", BACKENDS): docker's cases skip, with the reason, where it cannot run.
BACKENDS = [
    "bwrap",
    pytest.param("docker", marks=pytest.mark.skipif(bool(docker_ready()), reason=f"docker: {docker_ready()}")),
]
