"""hf-gpt-custom: a GPT-2 family language model native to the Hugging Face ecosystem.

Importing this package registers the config, the models and the tokenizer with transformers' Auto classes, and
marks them for `auto_map` so a folder written by `save_pretrained` loads with `trust_remote_code=True` anywhere.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

from .configuration_gpt_custom import PRESETS, GPTCustomConfig
from .modeling_gpt_custom import GPTCustomForCausalLM, GPTCustomModel, GPTCustomPreTrainedModel
from .onednn_linear import use_onednn_linear
from .tokenization_gpt_custom import GPTCustomTokenizerFast

AutoConfig.register(GPTCustomConfig.model_type, GPTCustomConfig, exist_ok=True)
AutoModel.register(GPTCustomConfig, GPTCustomModel, exist_ok=True)
AutoModelForCausalLM.register(GPTCustomConfig, GPTCustomForCausalLM, exist_ok=True)
AutoTokenizer.register(GPTCustomConfig, fast_tokenizer_class=GPTCustomTokenizerFast, exist_ok=True)

# Recorded in config.json / tokenizer_config.json `auto_map` on save, so remote code finds every class.
GPTCustomConfig.register_for_auto_class()
GPTCustomModel.register_for_auto_class("AutoModel")
GPTCustomForCausalLM.register_for_auto_class("AutoModelForCausalLM")
GPTCustomTokenizerFast.register_for_auto_class("AutoTokenizer")

__all__ = [
    "PRESETS",
    "GPTCustomConfig",
    "GPTCustomForCausalLM",
    "GPTCustomModel",
    "GPTCustomPreTrainedModel",
    "GPTCustomTokenizerFast",
    "use_onednn_linear",
]
