"""transformers' ModelTesterMixin (vendored, see README.md) on non-default blocks: a LLaMA-style one (RoPE, RMSNorm,
SwiGLU, no biases, grouped-query attention, untied head) and GPT-1/Transformer-style post-norm blocks with
sinusoidal positions. Same harness and tester as test_gpt_custom_common.py, other config."""

import pytest

pytest.importorskip("parameterized")  # modeling_common.py's only extra test dependency

from hf_gpt_custom.architecture import check_architecture  # noqa: E402

from .test_gpt_custom_common import (  # noqa: E402
    GPTCustomModelTest,
    GPTCustomModelTester,
    listed_like_a_builtin_model,  # noqa: F401 (the autouse fixture, for these tests too)
)

# No vocabulary padding here: transformers' resize tests assert the embedding has exactly the requested rows, which a
# padded vocabulary contradicts by design (test_family_matrix.py tests padding, resizing it included).
LLAMA_STYLE = {"position_embedding_type": "rope", "rope_theta": 500.0, "norm_type": "rmsnorm", "mlp_type": "swiglu",
               "attention_bias": False, "mlp_bias": False, "n_kv_head": 2, "tie_word_embeddings": False}
POST_NORM_SINUSOIDAL = {"norm_position": "post", "position_embedding_type": "sinusoidal", "activation_function": "relu"}


class VariantModelTester(GPTCustomModelTester):
    block_options: dict = {}

    def get_config(self):
        config = super().get_config()
        for name, value in self.block_options.items():
            setattr(config, name, value)
        # The options were set after construction: check them as a whole, by the rules construction applies.
        check_architecture({name: getattr(config, name) for name in type(config).__annotations__})
        return config


class LlamaStyleTester(VariantModelTester):
    block_options = LLAMA_STYLE


class PostNormSinusoidalTester(VariantModelTester):
    block_options = POST_NORM_SINUSOIDAL


# The whole common suite once more per block: ~13 s of CPU each (105 tests, 61 skipped, as for the default block).
class GPTCustomLlamaStyleModelTest(GPTCustomModelTest):
    def setUp(self):
        self.model_tester = LlamaStyleTester(self)


@pytest.mark.slow  # the GPT-1/Transformer-style block: the quick run keeps one variant of the suite
class GPTCustomPostNormSinusoidalModelTest(GPTCustomModelTest):
    def setUp(self):
        self.model_tester = PostNormSinusoidalTester(self)


del GPTCustomModelTest  # imported only to subclass: collected (and run) in its own file
