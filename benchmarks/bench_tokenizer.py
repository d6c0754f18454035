"""Encoding speed: our tokenizer vs transformers' GPT2TokenizerFast vs tiktoken, same vocabulary, same text.

Run by hand (not collected by pytest); it prints MB/s and ratios, it does not pass or fail:

    python benchmarks/bench_tokenizer.py                    # 1 thread, 7 rounds (~2 minutes)
    python benchmarks/bench_tokenizer.py --threads 2 --rounds 11

The vocabulary is trained once (8192 entries on tiny Shakespeare + WikiText-2 test) unless --tokenizer points at a
folder. The corpus is the same two files from ../shared/data (2.4 MB): "single" encodes it as one string, "batch"
as a list of documents (WikiText lines, Shakespeare speeches). Every round times every contender once, in a rotated
order, after one warm-up round, so a slow moment on a shared machine hits all of them; the table reports the median
and the min-max spread in MB/s of UTF-8 input, and speed ratios ours/anchor computed per round (median, min-max).
Ids are checked identical across all contenders before timing. Results go to
benchmarks/results/bench_tokenizer_threads<N>.{json,md,png}.

Which engine does the work: our `__call__` and `encode_ids_batch` take their ids from tiktoken's Rust BPE (built
from our vocabulary after checking it encodes identically; `encode_ids_engine` in the JSON) — a plain loop on one
thread, chunks of documents joined into one call per chunk on more threads — and `__call__` adds the attention
masks and a BatchEncoding whose `tokenizers` Encodings are made only if asked for. GPT2TokenizerFast runs the Rust
`tokenizers` library; `tokenizers encode_batch_fast` is the call our tokenizer falls back to without tiktoken.
tiktoken is timed two ways: `encode_ordinary_batch` (its batch API: a thread pool with one future per document) and
a plain loop of `encode_ordinary` (its fastest way through a list on one thread). The headline ratios compare what
users call — `tokenizer(texts)` — and `encode_ids_batch` with the FASTEST tiktoken batch path of the run (by median
MB/s; `fastest_tiktoken` in the JSON), and the JSON records the machine: CPU model, family/model, ISA flags, threads.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

CORPUS_FILES = ("tinyshakespeare/input.txt", "wikitext-2-raw/wiki.test.raw")  # in the tokenizer's training order


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for batch encoding, all libraries (default: 1)")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds after one warm-up round (default: 7)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: train one with --vocab-size)")
    parser.add_argument("--vocab-size", type=int, default=8192, help="vocabulary to train if no --tokenizer (default: 8192)")
    parser.add_argument("--data-dir", default=None, help="shared data folder (default: ../shared/data beside the repo)")
    parser.add_argument("--out", default=None, help="results folder (default: benchmarks/results)")
    return parser.parse_args()


def find_data_dir(data_dir: str | None) -> Path:
    """--data-dir, else ../shared/data beside the checkout; exits 2 naming the folder when a corpus file is missing.

    Checked before the heavy imports: a missing folder was a FileNotFoundError traceback after them."""
    folder = Path(data_dir) if data_dir else Path(__file__).resolve().parents[2] / "shared" / "data"
    missing = [folder / name for name in CORPUS_FILES if not (folder / name).is_file()]
    if missing:
        what = f"the data folder {folder} does not exist" if not folder.is_dir() else f"{missing[0]} not found"
        print(f"bench_tokenizer: {what}; put the shared data there (README: ../shared/data, beside the checkout) "
              "or pass --data-dir", file=sys.stderr)
        raise SystemExit(2)
    return folder


ARGS = parse_args()
DATA_DIR = find_data_dir(ARGS.data_dir)
# The Rust thread pool (rayon) reads this once, when tokenizers first parallelises: set it before any import.
os.environ["RAYON_NUM_THREADS"] = str(ARGS.threads)
os.environ["TOKENIZERS_PARALLELISM"] = "true" if ARGS.threads > 1 else "false"

import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import tiktoken  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from transformers import GPT2TokenizerFast  # noqa: E402

from benchmarks.common import describe_machine, machine_info  # noqa: E402
from hf_gpt_custom import GPTCustomTokenizerFast  # noqa: E402
from hf_gpt_custom.tiktoken_engine import tiktoken_encoding  # noqa: E402
from hf_gpt_custom.tokenizer_training import train_tokenizer  # noqa: E402


def load_corpus(data_dir: Path) -> tuple[str, list[str]]:
    """(one string, list of documents) — the same bytes either way."""
    wiki = (data_dir / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")
    shakespeare = (data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    documents = wiki.splitlines(keepends=True) + [speech + "\n\n" for speech in shakespeare.split("\n\n")]
    return "".join(documents), documents


def contenders(ours: GPTCustomTokenizerFast, gpt2: GPT2TokenizerFast, tik: tiktoken.Encoding, threads: int) -> dict:
    """name -> (mode, function(input) -> ids), each library called as users call it. The corpus holds no special-token
    text, so `__call__`'s default (such text becomes the special token) and `encode_ordinary`'s give the same ids."""
    return {
        "ours __call__ (single)": ("single", lambda text: ours(text)["input_ids"]),
        "GPT2TokenizerFast __call__ (single)": ("single", lambda text: gpt2(text)["input_ids"]),
        "tiktoken encode_ordinary (single)": ("single", tik.encode_ordinary),
        "ours __call__ (batch)": ("batch", lambda docs: ours(docs)["input_ids"]),
        "ours encode_ids_batch (batch)": ("batch", ours.encode_ids_batch),
        "tokenizers encode_batch_fast (batch)": ("batch", lambda docs: [
            encoding.ids for encoding in ours.backend_tokenizer.encode_batch_fast(docs, add_special_tokens=False)]),
        "GPT2TokenizerFast __call__ (batch)": ("batch", lambda docs: gpt2(docs)["input_ids"]),
        # run_all.py takes the first tiktoken batch row as the anchor: keep the batch API first
        "tiktoken encode_ordinary_batch (batch)": ("batch", lambda docs: tik.encode_ordinary_batch(docs, num_threads=threads)),
        "tiktoken encode_ordinary loop (batch)": ("batch", lambda docs: [tik.encode_ordinary(doc) for doc in docs]),
    }


def flatten(ids) -> list[int]:
    return [token_id for document in ids for token_id in document] if ids and isinstance(ids[0], list) else list(ids)


def main() -> None:
    out_dir = Path(ARGS.out) if ARGS.out else REPO_ROOT / "benchmarks" / "results"
    text, documents = load_corpus(DATA_DIR)
    megabytes = len(text.encode("utf-8")) / 1e6

    with tempfile.TemporaryDirectory() as scratch:
        folder = ARGS.tokenizer
        if folder is None:
            folder = train_tokenizer([DATA_DIR / name for name in CORPUS_FILES],
                                     Path(scratch) / "tokenizer", vocab_size=ARGS.vocab_size, show_progress=False)
        ours = GPTCustomTokenizerFast.from_pretrained(folder)
        gpt2 = GPT2TokenizerFast.from_pretrained(folder)
    tik = tiktoken_encoding(ours)
    runs = contenders(ours, gpt2, tik, ARGS.threads)
    inputs = {"single": text, "batch": documents}

    # Correctness first: every contender gives the same ids, in both modes. (The two modes differ from each other
    # only where a document boundary cuts a whitespace run, so each mode has its own expected ids.)
    expected = {"single": tik.encode_ordinary(text), "batch": flatten([tik.encode_ordinary(doc) for doc in documents])}
    for name, (mode, encode) in runs.items():
        if flatten(encode(inputs[mode])) != expected[mode]:
            raise SystemExit(f"{name} gives different ids from tiktoken; not timing a wrong answer")
    n_tokens = len(expected["single"])

    names = list(runs)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(ARGS.rounds + 1):  # round 0 is the warm-up, not recorded
        order = names[round_index % len(names):] + names[: round_index % len(names)]
        for name in order:
            mode, encode = runs[name]
            start = time.perf_counter()
            encode(inputs[mode])
            elapsed = time.perf_counter() - start
            if round_index > 0:
                seconds[name].append(elapsed)

    rows = []
    for name in names:
        rates = sorted(megabytes / s for s in seconds[name])
        rows.append({"name": name, "mode": runs[name][0], "mb_per_s_median": statistics.median(rates),
                     "mb_per_s_min": rates[0], "mb_per_s_max": rates[-1], "seconds": seconds[name]})
    def speed_ratio(ours_name: str, anchor_name: str) -> dict:
        # Per round, ours and the anchor ran back to back, so their ratio drifts far less than either time.
        per_round = sorted(anchor / ours for ours, anchor in zip(seconds[ours_name], seconds[anchor_name]))
        return {"median": statistics.median(per_round), "min": per_round[0], "max": per_round[-1]}

    # The anchor for the headline ratios is whichever tiktoken batch path was faster in this run, by median.
    tiktoken_rows = [row for row in rows if row["mode"] == "batch" and row["name"].startswith("tiktoken")]
    fastest_tiktoken = max(tiktoken_rows, key=lambda row: row["mb_per_s_median"])["name"]
    fastest_label = fastest_tiktoken.removesuffix(" (batch)")
    ratios = {
        f"batch: ours __call__ / {fastest_label}": speed_ratio("ours __call__ (batch)", fastest_tiktoken),
        f"batch: ours encode_ids_batch / {fastest_label}": speed_ratio("ours encode_ids_batch (batch)", fastest_tiktoken),
        "batch: ours __call__ / GPT2TokenizerFast": speed_ratio("ours __call__ (batch)", "GPT2TokenizerFast __call__ (batch)"),
        "batch: ours encode_ids_batch / GPT2TokenizerFast": speed_ratio("ours encode_ids_batch (batch)", "GPT2TokenizerFast __call__ (batch)"),
        "batch: ours encode_ids_batch / tokenizers encode_batch_fast": speed_ratio("ours encode_ids_batch (batch)", "tokenizers encode_batch_fast (batch)"),
        "single: ours / GPT2TokenizerFast": speed_ratio("ours __call__ (single)", "GPT2TokenizerFast __call__ (single)"),
        "single: ours / tiktoken": speed_ratio("ours __call__ (single)", "tiktoken encode_ordinary (single)"),
    }
    for row in tiktoken_rows:  # the slower tiktoken path too, after the headline (`fastest_tiktoken` says which)
        label = row["name"].removesuffix(" (batch)")
        for ours_name in ("ours __call__", "ours encode_ids_batch"):
            ratios.setdefault(f"batch: {ours_name} / {label}", speed_ratio(f"{ours_name} (batch)", row["name"]))
    result = {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {**machine_info(ARGS.threads), "platform": platform.platform()},
        "versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__, "tiktoken": tiktoken.__version__},
        "threads": ARGS.threads, "rounds": ARGS.rounds, "vocab_size": len(ours), "encode_ids_engine": ours.encode_ids_engine(),
        "corpus": "wikitext-2-raw/wiki.test.raw + tinyshakespeare/input.txt",
        "corpus_mb": megabytes, "n_documents": len(documents), "n_tokens": n_tokens, "ids_identical": True,
        "fastest_tiktoken": fastest_tiktoken, "rows": rows, "ratios": ratios,
    }
    write_results(result, out_dir)
    print(render_markdown(result))


def render_markdown(result: dict) -> str:
    lines = [
        f"# Tokenizer encoding speed ({result['date_utc']})",
        "",
        f"{result['corpus']}: {result['corpus_mb']:.2f} MB, {result['n_documents']} documents, {result['n_tokens']:,} "
        f"tokens, vocabulary {result['vocab_size']}; threads={result['threads']}, {result['rounds']} rounds after a "
        f"warm-up, every contender once per round in rotated order; ids identical across all: "
        f"{result['ids_identical']}. Measured on {describe_machine(result['machine'])} (a shared machine), "
        f"tokenizers {result['versions']['tokenizers']}, transformers {result['versions']['transformers']}, "
        f"tiktoken {result['versions']['tiktoken']}. `ours encode_ids_batch` runs on "
        f"{result.get('encode_ids_engine', 'tokenizers (before the tiktoken engine)')}.",
        "",
        "| contender | mode | MB/s median | MB/s min-max |",
        "|---|---|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['name']} | {row['mode']} | {row['mb_per_s_median']:.2f} | "
                     f"{row['mb_per_s_min']:.2f}-{row['mb_per_s_max']:.2f} |")
    lines += ["", f"Fastest tiktoken batch path in this run: `{result['fastest_tiktoken']}`; the first two ratios (the "
              "user path `__call__` and `encode_ids_batch`) are against it.", "", "| speed ratio, per round (>1: ours faster) | median | min-max |", "|---|---:|---:|"]
    lines += [f"| {name} | {value['median']:.2f} | {value['min']:.2f}-{value['max']:.2f} |"
              for name, value in result["ratios"].items()]
    lines += [
        "",
        "Who does the work: `ours __call__` and `ours encode_ids_batch` run tiktoken's Rust BPE, built from our "
        "vocabulary once it is verified to give identical ids: on 1 thread it is the same loop as `tiktoken "
        "encode_ordinary loop`, so parity with that row is the expected result; on N threads it encodes chunks of "
        "documents joined into one tiktoken call each. `__call__` adds attention masks and a BatchEncoding (its "
        "`tokenizers` Encodings are made only when asked for). GPT2TokenizerFast runs the Rust `tokenizers` library "
        "(`tokenizers encode_batch_fast` is the same library without transformers around it, and what our tokenizer "
        "falls back to without tiktoken). `tiktoken encode_ordinary_batch` is tiktoken's batch API (a thread pool, "
        f"one future per document, num_threads={result['threads']}); the loop is always 1 thread.",
    ]
    return "\n".join(lines) + "\n"


def write_results(result: dict, out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench_tokenizer_threads{result['threads']}"
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out_dir / f"{stem}.md").write_text(render_markdown(result), encoding="utf-8")
    rows = result["rows"]
    medians = [row["mb_per_s_median"] for row in rows]
    errors = [[m - row["mb_per_s_min"] for m, row in zip(medians, rows)], [row["mb_per_s_max"] - m for m, row in zip(medians, rows)]]
    figure, axis = plt.subplots(figsize=(9, 4.5))
    colors = ["tab:blue" if row["name"].startswith("ours") else "tab:gray" for row in rows]
    axis.barh([row["name"] for row in rows], medians, xerr=errors, color=colors)
    axis.invert_yaxis()
    axis.set_xlabel("MB/s of UTF-8 text (median, min-max bars)")
    axis.set_title(f"Encoding {result['corpus_mb']:.1f} MB, vocab {result['vocab_size']}, threads={result['threads']}")
    figure.tight_layout()
    figure.savefig(out_dir / f"{stem}.png", dpi=120)
    plt.close(figure)


if __name__ == "__main__":
    main()
