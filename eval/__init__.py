"""Zero-, one- and few-shot evaluation of any causal LM on real benchmarks, the GPT-3 way.

Tasks are YAML files in eval/tasks (lm-evaluation-harness vocabulary); `eval.runner.evaluate` is the entry point.
Nothing here imports hf_gpt_custom: a transformers GPT-2 or any AutoModelForCausalLM folder works the same.
"""
