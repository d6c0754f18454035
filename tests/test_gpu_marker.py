"""The `gpu` marker (tests/conftest.py): its tests are skipped, saying why, where CUDA is absent, and run where it is
present. This file sits outside tests/gpu/ so that a hook skipping that whole folder cannot skip it too."""

import pytest
import torch

from tests import conftest


class _Item:
    """What the hook reads of a collected test: its markers (a test under tests/gpu/ also has "gpu" among its
    keywords, the folder's name, whether it is marked or not)."""

    def __init__(self, *marker_names):
        self.keywords = {"gpu", "test_gpu_marker.py"}
        self.markers = [getattr(pytest.mark, name) for name in marker_names]

    def get_closest_marker(self, name):
        return next((marker for marker in self.markers if marker.name == name), None)

    def add_marker(self, marker):
        self.markers.append(marker)


@pytest.mark.parametrize("cuda", [False, True], ids=["no_cuda", "cuda"])
def test_gpu_tests_are_skipped_only_without_cuda(monkeypatch, cuda):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    gpu_test, cpu_test = _Item("gpu"), _Item("slow")
    conftest.pytest_collection_modifyitems(None, [gpu_test, cpu_test])
    assert [marker.name for marker in cpu_test.markers] == ["slow"]
    if cuda:
        assert [marker.name for marker in gpu_test.markers] == ["gpu"]
    else:
        gpu, skip = gpu_test.markers
        assert skip.name == "skip" and "needs CUDA" in skip.kwargs["reason"]
