"""Every transformers GPT-2, OpenAI GPT and Llama head class with a counterpart here converts, from a saved folder
and from memory, with its labels, and gives the outputs of transformers' own class holding the same weights."""

import pytest
import torch
import transformers
from transformers import GPT2Config, LlamaConfig, OpenAIGPTConfig

from hf_gpt_custom import (
    GPTCustomForCausalLM,
    GPTCustomForMultipleChoice,
    GPTCustomForQuestionAnswering,
    GPTCustomForSequenceClassification,
    GPTCustomForTokenClassification,
    GPTCustomModel,
)
from hf_gpt_custom.convert_gpt2 import from_gpt2_model
from hf_gpt_custom.convert_llama import from_llama_model
from hf_gpt_custom.convert_openai_gpt import from_openai_gpt_model
from hf_gpt_custom.errors import UserError

from tests.helpers import TINY_GPT2, randomize_

PAD = 0
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
FAMILIES = {  # config, in-memory converter
    "GPT2": (lambda: GPT2Config(**TINY_GPT2, pad_token_id=PAD), from_gpt2_model),
    "OpenAIGPT": (lambda: OpenAIGPTConfig(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                          pad_token_id=PAD), from_openai_gpt_model),
    "Llama": (lambda: LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=80, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                  pad_token_id=PAD), from_llama_model),
}
HEADS = [  # transformers class, ours
    ("GPT2ForSequenceClassification", GPTCustomForSequenceClassification),
    ("GPT2ForTokenClassification", GPTCustomForTokenClassification),
    ("GPT2ForQuestionAnswering", GPTCustomForQuestionAnswering),
    ("OpenAIGPTForSequenceClassification", GPTCustomForSequenceClassification),
    ("LlamaForSequenceClassification", GPTCustomForSequenceClassification),
    ("LlamaForTokenClassification", GPTCustomForTokenClassification),
    ("LlamaForQuestionAnswering", GPTCustomForQuestionAnswering),
]
DOUBLE_HEADS = ["GPT2DoubleHeadsModel", "OpenAIGPTDoubleHeadsModel"]


def family_of(class_name: str) -> str:
    return next(family for family in FAMILIES if class_name.startswith(family))


def reference_model(class_name: str, **config_fields):
    """transformers' `class_name` on a tiny config, every weight random (biases and norms too), in eval mode."""
    torch.manual_seed(0)
    config = FAMILIES[family_of(class_name)][0]()
    for name, value in config_fields.items():
        setattr(config, name, value)
    return randomize_(getattr(transformers, class_name)(config)).eval()


def padded_rows(side: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids): rows of 9, 5 and 3 tokens padded with PAD on `side`; positions
    count from each row's first token, as transformers' heads need them for left padding."""
    input_ids = torch.randint(1, 99, (3, 9), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    for row, length in enumerate((9, 5, 3)):
        padding = slice(0, 9 - length) if side == "left" else slice(length, 9)
        attention_mask[row, padding] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, PAD)
    return input_ids, attention_mask, (attention_mask.cumsum(-1) - 1).clamp(min=0)


def head_outputs(model, our_class, side: str) -> dict[str, torch.Tensor]:
    """The head's logits and loss on padded rows with labels, as one dict whichever the head."""
    input_ids, attention_mask, position_ids = padded_rows(side)
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    if our_class is GPTCustomForSequenceClassification:
        inputs["labels"] = torch.tensor([2, 0, 1])
    elif our_class is GPTCustomForTokenClassification:
        inputs["labels"] = torch.randint(0, 3, input_ids.shape, generator=torch.Generator().manual_seed(2))
        inputs["labels"] = inputs["labels"].masked_fill(attention_mask == 0, -100)
    else:
        last = attention_mask.shape[1] - 1 if side == "left" else attention_mask.sum(-1) - 1
        positions = dict(start_positions=torch.tensor([1, 2, 0]), end_positions=torch.as_tensor(last).expand(3))
        with torch.no_grad():  # the QA loss: unpadded, where ours (over real columns) and transformers' agree
            loss = model(input_ids=input_ids, **positions).loss
            output = model(**inputs)
        return {"loss": loss, "start_logits": output.start_logits, "end_logits": output.end_logits}
    with torch.no_grad():
        output = model(**inputs)
    return {name: value for name, value in output.items() if name in ("loss", "logits", "start_logits", "end_logits")}


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("class_name, our_class", HEADS, ids=[name for name, _ in HEADS])
def test_a_transformers_head_converts_with_its_labels_and_outputs(tmp_path, class_name, our_class, side):
    reference = reference_model(class_name, id2label=LABELS, label2id={v: k for k, v in LABELS.items()},
                                problem_type=None if our_class is GPTCustomForQuestionAnswering else
                                "single_label_classification")
    reference.save_pretrained(tmp_path)
    expected = head_outputs(reference, our_class, side)
    converters = {"folder": lambda: our_class.from_pretrained(tmp_path),
                  "memory": lambda: FAMILIES[family_of(class_name)][1](reference, our_class)}
    for source, convert in converters.items():
        ours = convert()
        assert type(ours) is our_class and not ours.training, source
        if our_class is not GPTCustomForQuestionAnswering:
            assert ours.config.id2label == LABELS and ours.config.num_labels == 3, source
            assert ours.config.label2id == reference.config.label2id, source
            assert ours.config.problem_type == reference.config.problem_type, source
        assert ours.config.architectures == [our_class.__name__], source
        got = head_outputs(ours, our_class, side)
        assert got.keys() == expected.keys()
        real = padded_rows(side)[1].bool()
        for name, value in expected.items():  # per-token outputs at real tokens: padding is each model's garbage
            keep = real if value.shape[:2] == real.shape else ...
            torch.testing.assert_close(got[name][keep], value[keep], rtol=0, atol=1e-5, msg=f"{source}: {name}")


@pytest.mark.parametrize("class_name", DOUBLE_HEADS)
def test_a_double_heads_model_converts_to_multiple_choice_with_its_choice_probabilities(tmp_path, class_name):
    """GPT-1's multiple-choice head: a linear score of each choice's last token, softmax over the choices. Its bias
    adds one constant to every choice, so it is dropped: logits shift by it, probabilities and loss are the same."""
    reference = reference_model(class_name)
    reference.save_pretrained(tmp_path)
    input_ids = torch.randint(1, 99, (2, 3, 8), generator=torch.Generator().manual_seed(3))
    lengths = torch.tensor([[8, 5, 6], [3, 8, 7]])
    input_ids = input_ids.masked_fill(torch.arange(8) >= lengths[..., None], PAD)  # right padding
    labels = torch.tensor([2, 0])
    with torch.no_grad():
        expected = reference(input_ids, mc_token_ids=lengths - 1, mc_labels=labels)
    bias = reference.multiple_choice_head.summary.bias
    for ours in (GPTCustomForMultipleChoice.from_pretrained(tmp_path),
                 FAMILIES[family_of(class_name)][1](reference, GPTCustomForMultipleChoice)):
        with torch.no_grad():
            got = ours(input_ids, labels=labels)
        torch.testing.assert_close(got.logits + bias, expected.mc_logits, rtol=0, atol=1e-5)
        torch.testing.assert_close(got.logits.softmax(-1), expected.mc_logits.softmax(-1), rtol=0, atol=1e-6)
        torch.testing.assert_close(got.loss, expected.mc_loss, rtol=0, atol=1e-6)


@pytest.mark.parametrize("class_name", DOUBLE_HEADS)
def test_mc_token_ids_read_each_choice_where_the_double_heads_model_reads_it(tmp_path, class_name):
    """GPT-2 recipes read each choice at a [CLS] token they place themselves, given as mc_token_ids; the converted
    head swallowed the argument in **kwargs and read the last token, so the chosen answer could flip in silence.
    Reference: the transformers model with the same weights and positions. Bad positions and mc_labels are named."""
    reference = reference_model(class_name)
    ours = FAMILIES[family_of(class_name)][1](reference, GPTCustomForMultipleChoice)
    input_ids = torch.randint(1, 99, (2, 3, 8), generator=torch.Generator().manual_seed(4))
    mc_token_ids, labels = torch.tensor([[3, 5, 0], [7, 1, 4]]), torch.tensor([1, 2])
    with torch.no_grad():
        expected = reference(input_ids, mc_token_ids=mc_token_ids, mc_labels=labels)
        got = ours(input_ids, mc_token_ids=mc_token_ids, labels=labels)
    torch.testing.assert_close(got.logits.softmax(-1), expected.mc_logits.softmax(-1), rtol=0, atol=1e-6)
    torch.testing.assert_close(got.loss, expected.mc_loss, rtol=0, atol=1e-6)
    for bad, message in [(torch.tensor([[3, 8, 0], [7, 1, 4]]), "position 8, outside the 8 positions"),
                         (torch.tensor([[3, -1, 0], [7, 1, 4]]), "position -1"),
                         (torch.tensor([3, 5]), r"shape \(batch, n_choices\) = \(2, 3\)")]:
        with pytest.raises(UserError, match=message):
            ours(input_ids, mc_token_ids=bad)
    with pytest.raises(UserError, match="pass it as labels="):
        ours(input_ids, mc_labels=labels)


@pytest.mark.parametrize("option", [{"summary_activation": "tanh"}, {"summary_type": "mean"},
                                    {"summary_proj_to_labels": False}], ids=lambda option: next(iter(option)))
def test_a_double_heads_summary_that_is_not_our_head_is_refused_by_name(tmp_path, option):
    reference_model("GPT2DoubleHeadsModel", **option).save_pretrained(tmp_path)
    with pytest.raises(UserError, match=f"{next(iter(option))}="):
        GPTCustomForMultipleChoice.from_pretrained(tmp_path)


def test_a_transformers_head_folder_loaded_into_another_head_is_refused_by_name(tmp_path):
    reference_model("GPT2ForSequenceClassification").save_pretrained(tmp_path)
    # named as saved, with our class to load it (AutoModelForSequenceClassification would give transformers' own)
    with pytest.raises(UserError, match=r"holds a fine-tuned GPT2ForSequenceClassification \(our GPTCustomForSequence"
                                        r"Classification\), not a GPTCustomForTokenClassification: .* load it with "
                                        r"GPTCustomForSequenceClassification.from_pretrained,"):
        GPTCustomForTokenClassification.from_pretrained(tmp_path)
    with pytest.raises(UserError, match=r"load it with GPTCustomForSequenceClassification as the class to convert it "
                                        r"into,"):  # in memory: there is no folder to call from_pretrained on
        from_gpt2_model(reference_model("GPT2ForSequenceClassification"), GPTCustomForTokenClassification)


@pytest.mark.parametrize("class_name", ["GPT2ForSequenceClassification", "LlamaForQuestionAnswering",
                                        "OpenAIGPTDoubleHeadsModel"])
def test_a_transformers_head_folder_loads_as_a_causal_lm_or_body_without_its_head(tmp_path, class_name):
    """As transformers' own LM classes load it: the body converted, the task head left out, the LM head tied."""
    reference = reference_model(class_name, tie_word_embeddings=True)
    reference.save_pretrained(tmp_path)
    input_ids = torch.randint(1, 99, (2, 7))
    with torch.no_grad():
        expected = reference.base_model(input_ids).last_hidden_state
        for ours in (GPTCustomForCausalLM.from_pretrained(tmp_path), GPTCustomModel.from_pretrained(tmp_path)):
            body = getattr(ours, "transformer", ours)
            torch.testing.assert_close(body(input_ids).last_hidden_state, expected, rtol=0, atol=1e-5)
    assert ours.config.architectures is None or ours.config.architectures[0].startswith("GPTCustomFor")


@pytest.mark.parametrize("saved_by", ["transformers GPT-2", "ours"])
def test_a_new_label_set_on_a_saved_classifier_starts_a_new_head_as_transformers_does(tmp_path, saved_by):
    """num_labels=3 on a 2-label classifier with ignore_mismatched_sizes=True: transformers re-initialises the head and
    keeps the body. From our folder it was refused as "another architecture or incomplete", from a GPT-2 folder it
    was a bare size-mismatch RuntimeError."""
    from transformers import GPT2ForSequenceClassification

    torch.manual_seed(0)
    gpt2 = GPT2ForSequenceClassification(GPT2Config(**TINY_GPT2, num_labels=2, pad_token_id=0))
    saved = gpt2 if saved_by == "transformers GPT-2" else from_gpt2_model(gpt2, GPTCustomForSequenceClassification)
    saved.save_pretrained(tmp_path)
    with pytest.raises((UserError, RuntimeError), match="ignore_mismatched_sizes"):
        GPTCustomForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    model = GPTCustomForSequenceClassification.from_pretrained(tmp_path, num_labels=3, ignore_mismatched_sizes=True)
    assert model.score.weight.shape == (3, TINY_GPT2["n_embd"]) and model.config.num_labels == 3
    body = from_gpt2_model(gpt2, GPTCustomForSequenceClassification).transformer.state_dict()
    for name, tensor in model.transformer.state_dict().items():
        torch.testing.assert_close(tensor, body[name], rtol=0, atol=0)

    if saved_by == "ours":  # the body must still match: only the head may start anew
        from hf_gpt_custom import GPTCustomModel

        for model_class in (GPTCustomForSequenceClassification, GPTCustomModel):
            with pytest.raises(UserError, match="does not hold every weight"):
                model_class.from_pretrained(tmp_path, num_labels=3, n_positions=128, ignore_mismatched_sizes=True)


@pytest.mark.parametrize("class_name", ["LlamaForTokenClassification", "GPT2ForTokenClassification"])
def test_a_token_head_converts_with_its_dropout_and_a_classifier_without_bias(tmp_path, class_name):
    """transformers' token heads drop out at hidden_dropout where classifier_dropout is unset, and Llama's may leave out
    the classifier's bias (token_classification_bias=False): the conversion kept 0.1, and refused the bias-less head
    naming an internal key (the heads3 hunt). Reference: transformers' own head with the same weights."""
    fields = {"hidden_dropout": 0.3, **({"token_classification_bias": False} if class_name.startswith("Llama") else {})}
    reference = reference_model(class_name, **fields)
    reference.save_pretrained(tmp_path / "saved")
    for ours in (GPTCustomForTokenClassification.from_pretrained(tmp_path / "saved"),
                 FAMILIES[family_of(class_name)][1](reference, GPTCustomForTokenClassification)):
        assert ours.dropout.p == reference.dropout.p == 0.3
        assert (ours.classifier.bias is None) == (reference.score.bias is None if hasattr(reference, "score")
                                                  else reference.classifier.bias is None)
        ids = torch.randint(3, 64, (2, 7))
        torch.testing.assert_close(ours.eval()(ids).logits, reference(ids).logits, rtol=0, atol=1e-5)
        ours.save_pretrained(tmp_path / "ours")
        again = GPTCustomForTokenClassification.from_pretrained(tmp_path / "ours").eval()
        torch.testing.assert_close(again(ids).logits, reference(ids).logits, rtol=0, atol=1e-5)
        assert again.dropout.p == 0.3


@pytest.mark.parametrize("class_name", ["GPT2LMHeadModel", "LlamaForCausalLM"])
def test_a_causal_lm_converted_into_a_head_reports_its_new_and_unused_weights_as_transformers_does(tmp_path,
                                                                                                   class_name):
    """A transformers GPT-2 or Llama LM loaded into a head started a new, random classifier in silence (and dropped
    a Llama's trained lm_head), where transformers' own head class prints a LOAD REPORT naming score.weight as
    MISSING (the heads3 hunt). Reference: that report, for GPT2ForSequenceClassification on the same folder."""
    from transformers import GPT2ForSequenceClassification
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging as transformers_logging

    family = "GPT2" if class_name.startswith("GPT2") else "Llama"
    config = FAMILIES[family][0]()
    config.tie_word_embeddings = family == "GPT2"
    torch.manual_seed(0)
    getattr(transformers, class_name)(config).save_pretrained(tmp_path)
    logger = transformers_logging.get_logger("transformers.modeling_utils")
    verbosity = transformers_logging.get_verbosity()  # transformers' default, whatever an earlier test left
    transformers_logging.set_verbosity_warning()
    try:
        with CaptureLogger(logger) as ours:
            GPTCustomForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
        if family == "GPT2":
            with CaptureLogger(logger) as theirs:
                GPT2ForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
        with CaptureLogger(logger) as whole:  # every weight has its place: nothing to report
            GPTCustomForCausalLM.from_pretrained(tmp_path)
    finally:
        transformers_logging.set_verbosity(verbosity)
    assert "LOAD REPORT" in ours.out and "score.weight" in ours.out and "MISSING" in ours.out
    assert ("lm_head.weight" in ours.out and "UNEXPECTED" in ours.out) == (family == "Llama")  # untied: dropped
    if family == "GPT2":
        assert "score.weight" in theirs.out and "MISSING" in theirs.out
    assert "LOAD REPORT" not in whole.out


@pytest.mark.parametrize("converter", ["to_llama_model", "to_openai_gpt_model"])
def test_converting_a_task_head_back_is_refused_naming_the_limit(converter):
    """docs/model.md gives to_llama_model / to_openai_gpt_model as the way back to transformers: a task head failed
    with an AttributeError about generation_config (the heads3 hunt). A causal LM of the same block converts."""
    import hf_gpt_custom.convert_llama as convert_llama
    import hf_gpt_custom.convert_openai_gpt as convert_openai_gpt

    from hf_gpt_custom import GPTCustomConfig, GPTCustomForSequenceClassification

    module = convert_llama if converter == "to_llama_model" else convert_openai_gpt
    config = GPTCustomConfig.from_preset("llama-small" if converter == "to_llama_model" else "gpt1", vocab_size=99,
                                         n_positions=32, n_embd=32, n_layer=1, n_head=4, num_labels=2)
    with pytest.raises(UserError, match=rf"{converter} converts a causal LM \(GPTCustomForCausalLM\), not a "
                                        r"GPTCustomForSequenceClassification.*trust_remote_code=True"):
        getattr(module, converter)(GPTCustomForSequenceClassification(config))
