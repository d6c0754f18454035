"""Stand-ins for the two mixins modeling_common.py imports that transformers' 5.23.0 source distribution does not ship
(tests/exporters/test_export.py, tests/generation/test_utils.py). Empty: their tests are not run here; generation is
covered against GPT2LMHeadModel by tests/hf_gpt_custom/test_generation.py and by test_generation_contract.py."""


class ExportTesterMixin:
    pass


class GenerationTesterMixin:
    pass
