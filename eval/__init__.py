"""Zero-, one- and few-shot evaluation of any causal LM on real benchmarks, the GPT-3 way.

Tasks are YAML files in eval/tasks (lm-evaluation-harness vocabulary); `eval.runner.evaluate` is the entry point.
Any causal LM works (a folder of ours, a transformers GPT-2 converted on load, another architecture through
AutoModelForCausalLM, or a loaded model). runner.py imports hf_gpt_custom for its strict folder loader and errors.
"""
