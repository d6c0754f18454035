"""Register the pytest markers transformers' common tests use, so they collect under our --strict-markers."""

TRANSFORMERS_MARKERS = ("accelerate_tests", "flash_attn_test", "flash_attn_3_test", "flash_attn_4_test",
                        "torch_compile_test")


def pytest_configure(config):
    for marker in TRANSFORMERS_MARKERS:
        config.addinivalue_line("markers", f"{marker}: a transformers common-test marker (tests/transformers_common)")
