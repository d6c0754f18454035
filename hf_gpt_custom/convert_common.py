"""What the checkpoint converters (convert_gpt2, convert_openai_gpt, convert_llama) share: turning a transformers
config and state dict into ours (config.json fields, from_pretrained's overrides and device_map, the task head's
weights), building the model class they are given from them, and refusing by name what cannot carry over exactly.
Reading the checkpoint's files (config.json, weights, dtype, generation config) is checkpoint_files'. The key maps
live in the converter modules, one per architecture; which converter a folder needs is
auto_classes.CHECKPOINT_CONVERTERS. Imports neither the modeling file nor a converter. Shipped as remote code next to
the modeling file: imports only torch and siblings.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

from .auto_classes import refuse_another_head
from .checkpoint_files import HUB_KEYS, attach_generation_config, load_weights, loading_dtype, read_config_dict
from .configuration_gpt_custom import GPTCustomConfig
from .errors import UserError

# The weights that are Conv1D (in x out) in transformers' GPT-2 and OpenAI GPT, and nn.Linear (out x in) here.
CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# from_pretrained arguments about how to load, not what the model is, that load_converted_checkpoint honours. Any other
# argument naming a config attribute overrides it (num_labels=3 for a new head); the rest are refused by name.
LOADING_KWARGS = (*HUB_KEYS, "config", "dtype", "torch_dtype", "attn_implementation", "device_map",
                  "generation_config", "ignore_mismatched_sizes", "output_loading_info")
# Arguments that change nothing here: we are the code trust_remote_code would allow (code_revision, _commit_hash with
# it), the Auto classes and pipelines pass _from_auto / _from_pipeline / adapter_kwargs (PEFT's, always, when peft is
# installed) about themselves, and transformers 5 ignores low_cpu_mem_usage too.
HARMLESS_KWARGS = ("trust_remote_code", "code_revision", "_commit_hash", "_from_auto", "_from_pipeline",
                   "adapter_kwargs", "low_cpu_mem_usage")
# Arguments that ask for nothing at transformers' default value, which generic loading code may pass explicitly
# (None asks for nothing for every argument). Any other value of them would be dropped silently, so it is refused.
INERT_VALUES = {"weights_only": True, "offload_buffers": False, "use_kernels": False, "use_safetensors": True}
# device_map values that spread the model over the devices there are (accelerate's planners).
SPREADING_DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


@dataclass(frozen=True)
class CheckpointFamily:
    """What one converter module (convert_gpt2, convert_openai_gpt, convert_llama) knows about its architecture."""

    source: str  # the family's name in messages, e.g. "GPT-2"
    config_from: Callable[[dict], GPTCustomConfig]  # its config.json dict -> ours (UserError for what we lack)
    convert_state_dict: Callable[[dict], dict]  # its body and LM-head weights -> ours ("transformer." prefix)
    # transformers class -> (our class, its head's weight names -> ours; None drops a weight that has no effect)
    classes: dict[str, tuple[str, dict[str, str | None]]]


def same_names(*keys: str) -> dict[str, str]:
    """A head-weight map (CheckpointFamily.classes) for weights whose names are already ours."""
    return {key: key for key in keys}


# Config fields the task heads read, the same in every transformers config.
TASK_CONFIG_FIELDS = ("id2label", "label2id", "problem_type", "classifier_dropout")
# PretrainedConfig's own fields, which every transformers config carries and generic code reads from the model's
# config: the text-generation pipeline prepends `prefix`, forward returns hidden states per output_hidden_states,
# AutoTokenizer reads tokenizer_class. Dropped, a converted GPT-2 folder generated from another prompt than
# GPT2LMHeadModel on the same folder, in silence (the pipelines hunt).
GENERIC_CONFIG_FIELDS = ("prefix", "output_hidden_states", "output_attentions", "return_dict", "sep_token_id",
                         "decoder_start_token_id", "finetuning_task", "task_specific_params", "tokenizer_class")


def read_as_transformers_does(config_class, config_dict: dict, source: str):
    """transformers' own `config_class` (GPT2Config, LlamaConfig...) for a config.json dict: the fields as that class
    reads them — a generic alias (num_attention_heads for n_head: its attribute_map), a field left out (its default),
    every generation of a format (rope_theta and rope_scaling at the top, or rope_parameters). Read raw, a GPT-2
    folder naming num_attention_heads loaded with 12 heads, no error and other logits (the convmatrix hunt)."""
    from huggingface_hub.errors import StrictDataclassError  # a field of the wrong type (transformers 5 validates)

    try:
        return config_class.from_dict(config_dict)
    except (TypeError, ValueError, RuntimeError, StrictDataclassError) as err:  # RuntimeError: a per_layer_config
        raise UserError(f"this {source} config.json is not valid for transformers' {config_class.__name__}: "
                        f"{err}") from err


def generic_config_fields(config) -> dict:
    """PretrainedConfig's generic fields set on `config`, for the transformers config it converts to (the reverse of
    converted_config's copy)."""
    return {name: getattr(config, name) for name in GENERIC_CONFIG_FIELDS if getattr(config, name, None) is not None}


def our_architectures(family: CheckpointFamily, config_dict: dict) -> list[str] | None:
    """A transformers config dict's `architectures` in our class names (None for a class without a counterpart)."""
    ours = family.classes.get((config_dict.get("architectures") or [None])[0])
    return [ours[0]] if ours else None


def converted_config(family: CheckpointFamily, config_dict: dict) -> GPTCustomConfig:
    """Our config for a transformers config dict: the family's fields, the task fields, PretrainedConfig's generic
    fields, and `architectures` in our class names (None for a transformers class without a counterpart here)."""
    config = family.config_from(config_dict)
    for name in (*TASK_CONFIG_FIELDS, *GENERIC_CONFIG_FIELDS):
        if config_dict.get(name) is not None:
            # output_attentions as config.json's loading stores it: its property setter also switches the
            # attention to eager, which transformers' class loading the same folder does not (it stays on sdpa)
            setattr(config, "_output_attentions" if name == "output_attentions" else name, config_dict[name])
    if any(config_dict.get(name) is not None for name in ("num_labels", "id2label", "label2id")):
        # The labels as transformers' class reads them (PretrainedConfig's rule): JSON's string keys as ints, and a
        # num_labels that disagrees with id2label wins, naming LABEL_i. Read raw, id2label won: a folder
        # GPT2ForSequenceClassification loads was refused as another head's (the roundreview25 hunt), and num_labels
        # alone gave a 2-label head (roundreview22).
        labels = PretrainedConfig.from_dict({name: config_dict[name] for name in ("num_labels", "id2label", "label2id")
                                             if config_dict.get(name) is not None})
        config.id2label, config.label2id = labels.id2label, labels.label2id
    if str((config_dict.get("architectures") or [""])[0]).endswith("ForTokenClassification"):
        # transformers' token heads (GPT-2's, and Llama's GenericForTokenClassification) drop out at hidden_dropout
        # where classifier_dropout is unset, and Llama's may leave out the classifier's bias
        if config_dict.get("classifier_dropout") is None and config_dict.get("hidden_dropout") is not None:
            config.classifier_dropout = config_dict["hidden_dropout"]
        if config_dict.get("token_classification_bias") is False:
            config.token_classification_bias = False
    config.architectures = our_architectures(family, config_dict)
    return config


def config_for_loading(family: CheckpointFamily, config_dict: dict, given, path: str | os.PathLike) -> GPTCustomConfig:
    """The config a checkpoint loads with: its config.json converted, or `config=` when given, as transformers'
    from_pretrained takes it: our GPTCustomConfig as it is, or a transformers config of the checkpoint's own
    model_type converted like config.json (task fields such as num_labels, pad_token_id and problem_type kept).
    `architectures` is always the checkpoint's: it says which head the weights hold."""
    if given is None:
        return converted_config(family, config_dict)
    if isinstance(given, GPTCustomConfig):
        config = copy.deepcopy(given)  # the caller's object stays as it was, as in transformers
    elif getattr(given, "model_type", None) == config_dict.get("model_type") and hasattr(given, "to_dict"):
        config = converted_config(family, given.to_dict())
    else:
        model_type = config_dict.get("model_type")
        raise UserError(f"config= is a {type(given).__name__}, but {path} is a {family.source} checkpoint; pass a "
                        f"GPTCustomConfig or a {model_type} config object (AutoConfig.from_pretrained of that folder, "
                        "with your changes)")
    config.architectures = our_architectures(family, config_dict)
    return config


def apply_config_overrides(config: GPTCustomConfig, kwargs: dict, source: str) -> None:
    """Set each config attribute a keyword argument names (num_labels=3 for a new task head). Refuse by name every
    other argument that is neither honoured (LOADING_KWARGS) nor harmless: dropping it would load something else
    than was asked for, silently (device placement, quantization, another weights file...)."""
    ignored = []
    for name, value in kwargs.items():
        if name in LOADING_KWARGS or name in HARMLESS_KWARGS:
            continue
        # rope_parameters (transformers 5's spelling of rope_theta; LlamaForCausalLM takes no rope_theta=) is no
        # attribute: a RoPE model's config reads it when set, and refuses scaling by name (the dtypeload3 hunt). A
        # learned-position model has no use for it (GPT2LMHeadModel refuses it): refused below, not ignored
        rope_argument = name in ("rope_parameters", "rope_scaling") and config.position_embedding_type == "rope"
        if hasattr(config, name) or rope_argument:
            setattr(config, name, value)
        elif value is not None and INERT_VALUES.get(name, object()) != value:
            ignored.append(f"{name}={value!r}")
    if ignored:
        raise UserError(f"from_pretrained got {', '.join(ignored)}, which converting the {source} does not "
                        "support; leave it out, or convert once with save_pretrained and load that folder with it")


def _as_device(value) -> torch.device | None:
    """torch.device(value) (0 is the first accelerator), or None for a value that names no device here ("disk")."""
    try:
        return torch.device(value)
    except (RuntimeError, TypeError):
        return None


def _the_only_device() -> torch.device | None:
    """Where "auto" puts a model that fits: the one accelerator there is, or the CPU without any (None: several)."""
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6; remote code may meet an older torch
    count = accelerator.device_count() if accelerator is not None else torch.cuda.device_count()
    if count > 1:
        return None
    if not count:
        return torch.device("cpu")
    return torch.device(accelerator.current_accelerator().type if accelerator is not None else "cuda", 0)


def single_device(device_map, source: str) -> torch.device | None:
    """The one device a from_pretrained `device_map` puts the whole model on ("cpu", "cuda:0", 0, a torch.device,
    {"": device}, a map naming one device, or "auto" where there is at most one accelerator); None for no map.

    A map over several devices is refused by name: converted weights are built in memory and moved as a whole."""
    if device_map is None:
        return None
    if isinstance(device_map, dict):
        devices = {_as_device(value) for value in device_map.values()}
    elif isinstance(device_map, str) and device_map in SPREADING_DEVICE_MAPS:
        devices = {_the_only_device()}
    else:
        devices = {_as_device(device_map)}
    if len(devices) != 1 or None in devices:
        raise UserError(f"device_map={device_map!r} places the {source} on several devices (or on none this machine "
                        "has), which loading it converted cannot do; pass one device (device_map='cuda:0' or 'cpu'), "
                        "or convert once with save_pretrained and load that folder with this device_map")
    return devices.pop()


def converted_state_dict(family: CheckpointFamily, state: dict[str, torch.Tensor], architecture: str | None) -> dict:
    """A transformers state dict in our names: the body and LM head by the family's map, the head by its class's."""
    head_names = family.classes.get(architecture, (None, {}))[1]
    converted = family.convert_state_dict({key: tensor for key, tensor in state.items() if key not in head_names})
    converted.update({ours: state[theirs] for theirs, ours in head_names.items() if ours and theirs in state})
    return converted


def model_and_loading_info(config: GPTCustomConfig, state: dict[str, torch.Tensor], model_class, source: str,
                           saved_as: str | None, dtype: torch.dtype | None = None,
                           ignore_mismatched_sizes: bool = False, in_memory: bool = False):
    """(`model_class(config)` built in `dtype` and loaded with `state`, its loading info): `state` is in our names,
    with GPTCustomForCausalLM's "transformer." prefix; the info is from_pretrained's output_loading_info dict, in our
    key names: missing_keys (a new head's weights), unexpected_keys (weights this class has no place for, e.g. the
    LM head under a classifier), mismatched_keys ((key, saved shape, new shape) of a head started anew), error_msgs.
    `saved_as` is the transformers class the checkpoint was saved as, for messages; `in_memory`: a model, not a
    folder.

    Built as from_pretrained builds it (default dtype set during __init__); the sinusoid table, the only floating
    buffer, stays float32 (block_variants.GPTCustomSinusoidalPositions). Every body weight must be there, and an untied
    LM head. The task head the checkpoint was saved with (config.architectures) loads into that class only; any other
    class starts a new head, as transformers does, and another task head is refused by name. A saved head of another
    shape (a new num_labels) is refused naming ignore_mismatched_sizes=True, with which it starts anew, as in transformers.
    """
    refuse_another_head(model_class.__name__, source, config.architectures, saved_as, in_memory)
    if config.tie_word_embeddings and holds_a_head_of_its_own(state):
        # transformers keeps such a head too ("we will NOT tie them"): tying would replace it with wte, changing
        # every logit in silence. The config says so, so that the model saves and reloads the way it now computes,
        # and a task head knows its body is untied (GPT-1's auxiliary LM loss through wte is then refused).
        warnings.warn(f"{source}'s config ties the LM head to the token embedding (tie_word_embeddings=True), but "
                      "its weights hold an lm_head.weight of its own, with other values: loaded untied, as "
                      "transformers loads it (config.tie_word_embeddings is now False)", stacklevel=3)
        config.tie_word_embeddings = False
    # Built at random and then overwritten: the random draws must not move the caller's generator, which
    # transformers' from_pretrained leaves where it was (a seed set before loading gave LoRA another start than on
    # GPT-2: the peftround2 hunt)
    with torch.random.fork_rng(devices=[]):
        model = model_class._from_config(config, dtype=dtype)
    own_state = model.state_dict()
    prefix = model_class.base_model_prefix + "."
    unused = set()
    if not hasattr(model, model_class.base_model_prefix):  # the bare body: its keys have no prefix
        unused = {key for key in state if not key.startswith(prefix)}
        state = {key.removeprefix(prefix): tensor for key, tensor in state.items() if key.startswith(prefix)}
        prefix = ""
    keeps_lm_head = "lm_head.weight" in own_state and not config.tie_word_embeddings  # a tied one is wte
    loads_saved_head = (config.architectures or [None])[0] == model_class.__name__
    head_keys = {key for key in own_state if not key.startswith(prefix) and key != "lm_head.weight"}

    def belongs_here(key: str) -> bool:
        return keeps_lm_head if key == "lm_head.weight" else key.startswith(prefix) or loads_saved_head

    resized = sorted(key for key in head_keys if loads_saved_head and key in state
                     and tuple(state[key].shape) != tuple(own_state[key].shape))
    if resized and not ignore_mismatched_sizes:
        raise UserError(f"{source} has a {', '.join(resized)} of another shape than this config's (e.g. another "
                        "num_labels); pass ignore_mismatched_sizes=True to start a new head, as in transformers")
    new_head = set(resized)
    loaded = {key: tensor for key, tensor in state.items() if belongs_here(key) and key not in new_head}
    try:
        missing, unexpected = model.load_state_dict(loaded, strict=False)
    except RuntimeError as err:  # a size mismatch: a config override (n_positions, vocab_size) that the weights lack
        mismatch = next((line.strip() for line in str(err).splitlines() if "size mismatch" in line), str(err))
        raise UserError(f"{source}'s weights do not fit this config ({mismatch}); leave out the override that "
                        "changes a weight's shape (n_positions, vocab_size, n_embd...)") from err
    new_keys = (set() if keeps_lm_head else {"lm_head.weight"}) | (new_head if loads_saved_head else head_keys)
    missing_from_file = [key for key in missing if key not in new_keys]
    if missing_from_file or unexpected:
        raise UserError(f"{source} does not match its config: missing {missing_from_file}, unexpected {unexpected}")
    model.tie_weights()
    unused |= set(state) - set(loaded) - new_head
    if config.tie_word_embeddings:
        unused.discard("lm_head.weight")  # a tied head saved anyway is the embedding matrix again
    loading_info = {
        "missing_keys": set(missing) - new_head - {"lm_head.weight"},  # a tied lm_head is wte, not a new weight
        "unexpected_keys": unused,
        "mismatched_keys": {(key, state[key].shape, own_state[key].shape) for key in resized},
        "error_msgs": [],
    }
    return model, loading_info


def report_loading(model, path, loading_info: dict) -> None:
    """transformers' LOAD REPORT, a warning naming the weights started anew and those left unused, as its own
    from_pretrained gives for the same folder (and ours for a folder of ours): a GPT-2 or Llama LM converted into a
    task head started its new head in silence, and a Llama's trained lm_head was dropped without a word."""
    if not (loading_info["missing_keys"] or loading_info["unexpected_keys"] or loading_info["mismatched_keys"]):
        return
    from transformers.utils import logging as transformers_logging

    logger = transformers_logging.get_logger("transformers.modeling_utils")  # transformers' verbosity governs it
    try:
        from transformers.utils.loading_report import LoadStateDictInfo, log_state_dict_report

        info = LoadStateDictInfo(missing_keys=set(loading_info["missing_keys"]),
                                 unexpected_keys=set(loading_info["unexpected_keys"]),
                                 mismatched_keys=set(loading_info["mismatched_keys"]), error_msgs=[],
                                 conversion_errors={}, skipped_pp_keys=set())
    except (ImportError, TypeError):  # a transformers 5.x without this report: the same facts, in a line
        logger.warning("%s from %s: newly initialized %s; unused %s; started anew at another shape %s",
                       type(model).__name__, path, sorted(loading_info["missing_keys"]),
                       sorted(loading_info["unexpected_keys"]),
                       sorted(key for key, *_ in loading_info["mismatched_keys"]))
        return
    # ignore_mismatched_sizes: a mismatch reaching here was asked for (model_and_loading_info refuses the others)
    log_state_dict_report(model, str(path), True, info, logger=logger)


def holds_a_head_of_its_own(state: dict[str, torch.Tensor]) -> bool:
    """True when `state` (our names) holds an lm_head.weight that is not the token embedding's values (a `.bin`
    checkpoint of a tied model stores the same matrix under both names)."""
    head, embedding = state.get("lm_head.weight"), state.get("transformer.wte.weight")
    if head is None or embedding is None:
        return False
    return head.shape != embedding.shape or not torch.equal(head, embedding)


def load_converted_checkpoint(path: str | os.PathLike, model_class, family: CheckpointFamily, **kwargs):
    """`model_class`, in eval mode, from the transformers checkpoint at `path` (a folder or Hub repo) of `family`,
    taking from_pretrained's arguments: `config=` (ours, or one of the family's), `dtype=` (default "auto":
    config.json's dtype, else the weights' own, as transformers 5 reads them: loading_dtype), `attn_implementation=`,
    `ignore_mismatched_sizes=`, a one-device `device_map=`, `generation_config=` (else the checkpoint's
    generation_config.json, as transformers loads it) and `output_loading_info=True` (then returns (model,
    loading_info)). Other keyword arguments naming a config attribute override it (num_labels for a new task head);
    any other argument is refused by name (apply_config_overrides)."""
    source = f"{family.source} checkpoint {path}"
    config_dict = read_config_dict(path, **kwargs)
    config = config_for_loading(family, config_dict, kwargs.get("config"), path)
    # where it was loaded from, as transformers records it: PEFT's adapter_config.json names it as the base model,
    # lm-eval's HFLM(pretrained=model) loads the tokenizer from it (save_pretrained leaves it out of config.json)
    config.name_or_path = str(path)
    apply_config_overrides(config, kwargs, source)
    device = single_device(kwargs.get("device_map"), source)
    if kwargs.get("attn_implementation"):
        config._attn_implementation = kwargs["attn_implementation"]
    architecture = (config_dict.get("architectures") or [None])[0]
    weights = load_weights(path, family.source, **kwargs)
    # transformers 5's from_pretrained: dtype=None is unset, so an older torch_dtype given beside it counts, else "auto"
    requested = kwargs.get("dtype")
    requested = kwargs.get("torch_dtype") if requested is None else requested
    # "auto" reads the config object in hand, as transformers' _get_dtype does: a config= given (its dtype, else the
    # weights'), not config.json, which gave a float32 model for a bf16 config (the dtypeload3 hunt)
    given = kwargs.get("config")
    saved = config_dict if given is None else {"dtype": getattr(given, "dtype", None)}
    dtype = loading_dtype("auto" if requested is None else requested, weights, saved)
    state = converted_state_dict(family, weights, architecture)
    model, loading_info = model_and_loading_info(config, state, model_class, source, architecture, dtype=dtype,
                                                 ignore_mismatched_sizes=bool(kwargs.get("ignore_mismatched_sizes")))
    report_loading(model, path, loading_info)
    if device is not None:
        model.to(device)
    if model.can_generate():
        attach_generation_config(model, path, config_dict, **kwargs)
    model.eval()
    return (model, loading_info) if kwargs.get("output_loading_info") else model


def convert_model(reference, model_class, family: CheckpointFamily):
    """`model_class`, in eval mode, holding the weights of the in-memory transformers model `reference` (any class in
    `family.classes`), with its config, generation config, dtype and attention implementation."""
    architecture = type(reference).__name__
    config = converted_config(family, {**reference.config.to_dict(), "architectures": [architecture]})
    config._attn_implementation = reference.config._attn_implementation
    config.name_or_path = reference.config.name_or_path
    state = converted_state_dict(family, reference.state_dict(), architecture)
    model, _ = model_and_loading_info(config, state, model_class, f"{family.source} model ({architecture})",
                                      architecture, dtype=reference.dtype, in_memory=True)
    if model.can_generate() and getattr(reference, "generation_config", None) is not None:
        model.generation_config = copy.deepcopy(reference.generation_config)
    return model.eval()


def require_causal_lm(model, converter: str) -> None:
    """A UserError naming the limit when `converter` (to_llama_model, to_openai_gpt_model) is given a task head: it
    failed with an AttributeError about generation_config (the heads3 hunt)."""
    if not getattr(model, "can_generate", lambda: False)():
        raise UserError(f"{converter} converts a causal LM (GPTCustomForCausalLM), not a {type(model).__name__}: "
                        "only a causal LM goes back to transformers' classes here; save_pretrained it and load the "
                        "folder with trust_remote_code=True")


def transformers_model_with_weights(reference_class, reference_config, state: dict[str, torch.Tensor],
                                    generation_config=None):
    """`reference_class(reference_config)` (a transformers model), in eval mode, holding `state`: every weight it
    has, nothing else, in the weights' dtype (the other direction of `model_and_loading_info`; a bf16 model became
    a float32 one, twice the memory, saved as float32), with `generation_config` (ours: its eos ids, penalties and
    lengths; the one its config implies dropped them)."""
    dtypes = {tensor.dtype for tensor in state.values() if tensor.is_floating_point()}
    # built in that dtype as from_pretrained(dtype=...) builds it: .to(bfloat16) would also round Llama's RoPE
    # frequencies, which transformers keeps in float32
    with torch.random.fork_rng(devices=[]):  # overwritten next: the caller's generator stays where it was
        reference = reference_class._from_config(reference_config, dtype=dtypes.pop() if len(dtypes) == 1 else None)
    reference.load_state_dict(state, strict=True)
    if generation_config is not None and reference.can_generate():
        reference.generation_config = copy.deepcopy(generation_config)
    return reference.eval()


# A double-heads model's multiple-choice summary is our head when it is one linear score per choice, no activation.
SUMMARY_AS_OURS = {"summary_use_proj": True, "summary_proj_to_labels": True, "summary_activation": None}


def refuse_unsupported_summary(source: str, config_dict: dict) -> None:
    """A UserError unless a double-heads config's multiple-choice summary is GPTCustomForMultipleChoice's score:
    SUMMARY_AS_OURS, read at one token ("cls_index": mc_token_ids, or "last"). Its dropout acts in training only."""
    wrong = {name: config_dict.get(name) for name, value in SUMMARY_AS_OURS.items()
             if (config_dict.get(name) or None) != value}
    if config_dict.get("summary_type") not in ("cls_index", "last"):
        wrong["summary_type"] = config_dict.get("summary_type")
    refuse_options(source, wrong, "GPTCustomForMultipleChoice scores each choice by one linear map of one token")


def refuse_options(source: str, enabled: dict[str, object], alternative: str) -> None:
    """A UserError naming every option in `enabled` (name -> value) that the converter cannot carry over exactly;
    nothing when it is empty. Converting anyway would give a model with other logits than the original."""
    if enabled:
        listed = ", ".join(f"{name}={value!r}" for name, value in enabled.items())
        raise UserError(f"this {source} checkpoint sets {listed}, which GPTCustom does not implement; {alternative}")


def refuse_inexpressible(target_class: str, enabled: dict[str, object], fix: str) -> None:
    """The other direction of `refuse_options`: a UserError naming every setting of our config in `enabled` (name ->
    value) that the transformers class `target_class` cannot express; nothing when it is empty. Exporting anyway
    would give a model with other logits, or a shape error while loading its weights."""
    if enabled:
        listed = ", ".join(f"{name}={value!r}" for name, value in enabled.items())
        raise UserError(f"this GPTCustom model sets {listed}, which {target_class} cannot express; {fix}")


__all__ = [
    "CheckpointFamily",
    "convert_model",
    "converted_config",
    "converted_state_dict",
    "load_converted_checkpoint",
    "model_and_loading_info",
    "refuse_inexpressible",
    "refuse_options",
    "refuse_unsupported_summary",
    "same_names",
    "transformers_model_with_weights",
]
