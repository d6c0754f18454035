"""transformers' own ModelTesterMixin (vendored from 5.24.0, see README.md) run against GPTCustomModel and
GPTCustomForCausalLM, so that a departure from what transformers expects of a model shows up in our suite."""

import unittest

import pytest

pytest.importorskip("parameterized")  # modeling_common.py's only extra test dependency

import torch  # noqa: E402
from transformers.models.auto import modeling_auto  # noqa: E402
from transformers.testing_utils import torch_device  # noqa: E402

from hf_gpt_custom import GPTCustomConfig, GPTCustomForCausalLM, GPTCustomModel  # noqa: E402

from .modeling_common import ModelTesterMixin, ids_tensor, random_attention_mask  # noqa: E402
from .stubs import GenerationTesterMixin  # noqa: E402


@pytest.fixture(autouse=True)
def listed_like_a_builtin_model(monkeypatch):
    """The common tests pick labels and skips by looking class names up in transformers' name tables (a base model is
    not trained, a causal LM gets labels); list ours there as transformers lists GPT-2, for these tests only."""
    monkeypatch.setitem(modeling_auto.MODEL_MAPPING_NAMES, "gpt_custom", "GPTCustomModel")
    monkeypatch.setitem(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "gpt_custom", "GPTCustomForCausalLM")


class GPTCustomModelTester:
    """Small config and random inputs, as transformers' per-model testers build them (cf. GPT2ModelTester)."""

    def __init__(self, parent, batch_size=7, seq_length=7, vocab_size=99, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, n_positions=64, is_training=True, attn_pdrop=0.1):
        self.parent = parent
        self.attn_pdrop = attn_pdrop  # GPT-2's default
        self.batch_size, self.seq_length = batch_size, seq_length
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.n_positions, self.is_training = n_positions, is_training

    def get_config(self) -> GPTCustomConfig:
        return GPTCustomConfig(
            vocab_size=self.vocab_size, n_embd=self.hidden_size, n_layer=self.num_hidden_layers,
            n_head=self.num_attention_heads, n_positions=self.n_positions, attn_pdrop=self.attn_pdrop,
            bos_token_id=self.vocab_size - 1,
            eos_token_id=self.vocab_size - 1, pad_token_id=self.vocab_size - 1,
        )

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


class GPTCustomModelTest(ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (GPTCustomModel, GPTCustomForCausalLM)

    def setUp(self):
        self.model_tester = GPTCustomModelTester(self)

    def test_flex_attention_with_grads(self):
        """transformers' flex_attention integration refuses attention dropout (a ValueError naming it), and this test
        runs the model in training mode: it checks that flex attention runs with gradients, so it runs without
        attention dropout (a flex-capable model's usual setting; GPT-2's 0.1 is our default). Runs where CUDA is."""
        self.model_tester.attn_pdrop = 0.0
        super().test_flex_attention_with_grads()

    def test_bc_cache_name_forward(self):
        """transformers 5.24's version of this test expects its models' deprecation warning for the old cache name.
        Ours keeps `past_key_values` as its own argument (what 5.23 and most user code pass) and also takes `cache`,
        without a warning (hf_gpt_custom/transformers_compat.py). What the test checks otherwise holds: both names
        give the same returned cache, and neither warns."""
        import copy
        import warnings

        from transformers.cache_utils import DynamicCache

        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config).to(torch_device).eval()
            caches = {}
            for name in ("past_key_values", "cache"):
                with warnings.catch_warnings(record=True) as caught, torch.no_grad():
                    warnings.simplefilter("always")
                    output = model(**copy.deepcopy(inputs), use_cache=True, **{name: DynamicCache(config=config)})
                self.assertFalse([w for w in caught if "deprecated" in str(w.message)], (model_class, name))
                caches[name] = output.cache if "cache" in output else output.past_key_values
            old, new = caches.values()
            self.assertGreater(old.get_seq_length(), 0)
            for layer_old, layer_new in zip(old.layers, new.layers):
                torch.testing.assert_close(layer_old.keys, layer_new.keys)
                torch.testing.assert_close(layer_old.values, layer_new.values)

    def test_forward_on_the_tester_inputs(self):
        """The tester's inputs give the shapes transformers' tests expect (guards the tester itself)."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        model = GPTCustomForCausalLM(config).to(torch_device).eval()
        with torch.no_grad():
            logits = model(**inputs).logits
        self.assertEqual(tuple(logits.shape), (7, 7, 99))

    def test_can_init_all_missing_weights(self):
        """transformers' check that `_init_weights` re-creates every parameter and buffer exactly as `__init__` does
        (a weight it forgets is left at torch's default init in a model loaded with missing weights). The mixin skips
        it for models whose config file carries no copyright year of 2023 or later, and its body loads with missing
        weights, which ours refuses (issue 22.12): so it runs here through transformers' own from_pretrained."""
        from unittest import mock

        from transformers import PreTrainedModel

        import copy

        from .modeling_common import seeded_weight_init

        transformers_loader = classmethod(PreTrainedModel.from_pretrained.__func__)
        with mock.patch.object(self, "test_can_init_all_missing_weights_before_2023", True, create=True):
            for model_class in self.all_model_classes:
                with mock.patch.object(model_class, "from_pretrained", transformers_loader):
                    with mock.patch.object(self, "all_model_classes", (model_class,)):
                        super().test_can_init_all_missing_weights()
                # transformers compares the state dict only: a buffer kept out of it (the sinusoid table) too
                config, _ = self.model_tester.prepare_config_and_inputs_for_common()
                with seeded_weight_init():
                    from_init = model_class(copy.deepcopy(config))
                    loaded = transformers_loader.__func__(model_class, None, config=copy.deepcopy(config),
                                                          state_dict={})
                loaded_buffers = dict(loaded.named_buffers())
                for name, buffer in from_init.named_buffers():
                    torch.testing.assert_close(loaded_buffers[name], buffer, rtol=0, atol=0, msg=name)

    def test_model_weights_reload_no_missing_tied_weights(self):
        """A deliberate departure from transformers: a weight missing from the file is an error naming it, not a
        random initialisation with a log line (issue 22.12). The same emptied file transformers' own loader reports
        missing weights for: ours refuses it, counting the same weights (tied ones aside)."""
        import os
        import tempfile

        from safetensors.torch import save_file
        from transformers import PreTrainedModel

        from hf_gpt_custom.errors import UserError

        for model_class in self.all_model_classes:
            config, _ = self.model_tester.prepare_config_and_inputs_for_common()
            with tempfile.TemporaryDirectory() as tmp_dir:
                model_class(config).save_pretrained(tmp_dir)
                save_file({"tensor": torch.tensor([1, 2])}, os.path.join(tmp_dir, "model.safetensors"), metadata={"format": "pt"})
                # transformers' own from_pretrained on our class, without our override's checks
                reference, info = PreTrainedModel.from_pretrained.__func__(model_class, tmp_dir, output_loading_info=True)
                tied = set(reference._tied_weights_keys or {}) if reference.config.tie_word_embeddings else set()
                expected = set(info["missing_keys"]) - tied
                self.assertTrue(expected)
                with self.assertRaisesRegex(UserError, rf"missing {len(expected)}, wrong shape 0"):
                    model_class.from_pretrained(tmp_dir)
