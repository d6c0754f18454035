"""Named functions a task YAML may refer to with `process_docs: <name>`.

Each takes the list of raw records of a data file and returns the list of docs the templates read. Templates
only look fields up; any logic (ARC's answer-key lookup, HellaSwag's cleanup, WikiText's page split) lives here,
mirroring the `utils.py` files of lm-evaluation-harness 0.4.13 where the local format allows.
"""

from __future__ import annotations

import re


def lambada_split_last_word(docs: list[dict]) -> list[dict]:
    """LAMBADA: context = all but the last word, target = " " + last word (lm-eval `text.rsplit(' ', 1)`)."""
    out = []
    for doc in docs:
        context, last_word = doc["text"].rsplit(" ", 1)
        out.append({"text": doc["text"], "context": context, "target": " " + last_word})
    return out


def _hellaswag_preprocess(text: str) -> str:
    # lm-eval hellaswag/utils.py preprocess(): brackets are WikiHow artifacts.
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    text = text.replace("  ", " ")
    return text


def hellaswag_to_choices(docs: list[dict]) -> list[dict]:
    """HellaSwag 6-line format (already cleaned by the extractor) -> query / choices / gold.

    The local file holds `activity_label: ctx` with ctx_b NOT capitalised (the Hub JSONL lets lm-eval capitalise
    it); we apply lm-eval's preprocess() to the same fields, which is a no-op on most lines.
    """
    return [
        {
            "query": _hellaswag_preprocess(doc["ctx"]),
            "choices": [_hellaswag_preprocess(doc[f"ending{i}"]) for i in range(4)],
            "gold": int(doc["label"]),
        }
        for doc in docs
    ]


def hellaswag_hub_to_choices(docs: list[dict]) -> list[dict]:
    """Rowan/hellaswag rows (ctx_a, ctx_b, endings) -> query / choices / gold, as lm-eval does."""
    return [
        {
            "query": _hellaswag_preprocess(doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize()),
            "choices": [_hellaswag_preprocess(ending) for ending in doc["endings"]],
            "gold": int(doc["label"]),
        }
        for doc in docs
    ]


def piqa_to_choices(docs: list[dict]) -> list[dict]:
    """PIQA: goal, [sol1, sol2], label 0/1 (from valid-labels.lst)."""
    return [{"goal": doc["goal"], "choices": [doc["sol1"], doc["sol2"]], "gold": int(doc["label"])} for doc in docs]


def arc_to_choices(docs: list[dict]) -> list[dict]:
    """Original AI2 ARC rows -> question / choices / gold; answerKey is matched against the labels (A-E or 1-5)."""
    out = []
    for doc in docs:
        labels = [choice["label"] for choice in doc["question"]["choices"]]
        out.append(
            {
                "id": doc["id"],
                "question": doc["question"]["stem"],
                "choices": [choice["text"] for choice in doc["question"]["choices"]],
                "gold": labels.index(doc["answerKey"]),
            }
        )
    return out


def arc_hub_to_choices(docs: list[dict]) -> list[dict]:
    """allenai/ai2_arc rows (flattened choices.text / choices.label) -> question / choices / gold."""
    return [
        {
            "id": doc["id"],
            "question": doc["question"],
            "choices": list(doc["choices"]["text"]),
            "gold": list(doc["choices"]["label"]).index(doc["answerKey"]),
        }
        for doc in docs
    ]


def boolq_label_to_int(docs: list[dict]) -> list[dict]:
    """BoolQ: label is the string "true"/"false" here and a bool on the Hub; both become 1/0 (choices no/yes)."""
    return [{**doc, "label": int(str(doc["label"]).lower() in ("true", "1"))} for doc in docs]


def _copa_lowercase_first(choice: str) -> str:
    return choice[0].lower() + choice[1:]


def copa_to_choices(docs: list[dict]) -> list[dict]:
    """COPA as lm-eval's super_glue/copa/utils.py: premise minus its period + " because"/" therefore"."""
    out = []
    for doc in docs:
        connector = {"cause": "because", "effect": "therefore"}[doc["question"]]
        out.append(
            {
                "premise": doc["premise"].strip()[:-1] + f" {connector}",
                "choices": [" " + _copa_lowercase_first(doc["choice1"]), " " + _copa_lowercase_first(doc["choice2"])],
                "gold": int(doc["label"]),
            }
        )
    return out


def winogrande_partial(docs: list[dict]) -> list[dict]:
    """llm-foundry Winogrande: each context option (sentence up to the blank, option filled in) and the shared
    continuation after the blank — the GPT-3 / lm-eval "partial scoring" inputs."""
    return [
        {"contexts": list(doc["context_options"]), "continuation": doc["continuation"], "gold": int(doc["gold"])}
        for doc in docs
    ]


def winogrande_hub_partial(docs: list[dict]) -> list[dict]:
    """allenai/winogrande rows (sentence with "_", option1/2, answer "1"/"2") -> the same partial-scoring fields,
    built as lm-eval's preprocess_winogrande.py does."""
    out = []
    for doc in docs:
        blank = doc["sentence"].index("_")
        out.append(
            {
                "contexts": [doc["sentence"][:blank] + doc["option1"], doc["sentence"][:blank] + doc["option2"]],
                "continuation": doc["sentence"][blank + 1 :].strip(),
                "gold": {"1": 0, "2": 1}[doc["answer"]],
            }
        )
    return out


def openbookqa_hub_to_choices(docs: list[dict]) -> list[dict]:
    """allenai/openbookqa rows (question_stem, choices.text/label, answerKey) -> question_stem / choices / gold."""
    return [
        {
            "question_stem": doc["question_stem"],
            "choices": list(doc["choices"]["text"]),
            "gold": list(doc["choices"]["label"]).index(doc["answerKey"].lstrip()),
        }
        for doc in docs
    ]


def triviaqa_hub_to_aliases(docs: list[dict]) -> list[dict]:
    """mandarjoshi/trivia_qa rc.nocontext rows -> question (with the "?" lm-eval's template adds) / aliases: lm-eval's
    `{{answer.aliases}}`, in their order (a few-shot example shows the first, as lm-eval's does)."""
    return [{"question": doc["question"] + "?", "aliases": list(doc["answer"]["aliases"])} for doc in docs]


def openbookqa_to_choices(docs: list[dict]) -> list[dict]:
    """llm-foundry OpenBookQA: query / choices / gold are already what the templates need."""
    return [{"question_stem": doc["query"], "choices": list(doc["choices"]), "gold": int(doc["gold"])} for doc in docs]


def triviaqa_to_aliases(docs: list[dict]) -> list[dict]:
    """llm-foundry TriviaQA (built from lm-eval's docs): question (with the "?" lm-eval's template adds to the raw
    question, as on the Hub: 377 of the 3,000 do not end in one, and the others get a second) / aliases in
    lm-eval's order. A few-shot example shows the first alias, as lm-eval's does ("Onion skins", not the canonical
    "Onion"); gold is every alias, which always includes the canonical answer in this file."""
    return [{"question": doc["context"].removeprefix("Question: ").removesuffix("\nAnswer:") + "?",
             "aliases": list(doc["aliases"])} for doc in docs]


def wikitext_to_pages(docs: list[dict]) -> list[dict]:
    """wiki.test.raw -> one doc per article, split at top-level headings ` = Title = ` as the
    EleutherAI/wikitext_document_level builder does; `page` is the raw text, `text` the detokenized one."""
    lines = "".join(doc["text"] for doc in docs).split("\n")
    pages, current = [], []
    for line in lines:
        heading = line.replace("= = =", "===").replace("= =", "==").strip()
        if heading.startswith("= ") and heading.endswith(" ="):
            page = "\n".join(current)
            if page.strip():
                pages.append(page)
            current = []
        current.append(line)
    pages.append("\n".join(current))
    return [{"page": page, "text": wikitext_detokenize(page)} for page in pages]


def wikitext_hub_pages(docs: list[dict]) -> list[dict]:
    """EleutherAI/wikitext_document_level rows are already pages: keep `page`, add the detokenized `text`."""
    return [{"page": doc["page"], "text": wikitext_detokenize(doc["page"])} for doc in docs]


def wikitext_detokenize(string: str) -> str:
    """lm-eval wikitext/preprocess_wikitext.py wikitext_detokenizer, verbatim in behaviour."""
    string = string.replace("s '", "s'")
    string = re.sub(r"/' [0-9]/", r"/'[0-9]/", string)
    string = string.replace(" @-@ ", "-")
    string = string.replace(" @,@ ", ",")
    string = string.replace(" @.@ ", ".")
    string = string.replace(" : ", ": ")
    string = string.replace(" ; ", "; ")
    string = string.replace(" . ", ". ")
    string = string.replace(" ! ", "! ")
    string = string.replace(" ? ", "? ")
    string = string.replace(" , ", ", ")
    string = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", string)
    string = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", string)
    string = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", string)
    string = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', string)
    string = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", string)
    string = string.replace("= = = =", "====")
    string = string.replace("= = =", "===")
    string = string.replace("= =", "==")
    string = string.replace(" " + chr(176) + " ", chr(176))
    string = string.replace(" \n", "\n")
    string = string.replace("\n ", "\n")
    string = string.replace(" N ", " 1 ")
    string = string.replace(" 's", "'s")
    return string


DOC_TRANSFORMS = {
    fn.__name__: fn
    for fn in (
        lambada_split_last_word,
        hellaswag_to_choices,
        hellaswag_hub_to_choices,
        piqa_to_choices,
        arc_to_choices,
        arc_hub_to_choices,
        boolq_label_to_int,
        copa_to_choices,
        winogrande_partial,
        winogrande_hub_partial,
        openbookqa_to_choices,
        openbookqa_hub_to_choices,
        triviaqa_to_aliases,
        triviaqa_hub_to_aliases,
        wikitext_to_pages,
        wikitext_hub_pages,
    )
}
