"""Model cards for hf-gpt-custom runs: `build_model_card(run_dir)` fills templates/model_card.md from a run folder."""

from .card import build_eval_results, build_model_card

__all__ = ["build_eval_results", "build_model_card"]
