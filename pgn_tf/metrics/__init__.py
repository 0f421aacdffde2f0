"""How summaries are measured: ROUGE as rouge-score computes it and the See et al. repetition and
novelty rates (scoring), the papers' ROUGE-1.5.5 (rouge155), the Debian digests' block measures
(digests), paired significance tests (significance) and the in-graph ROUGE-L reward of
self-critical training (rewards). Importing the package imports none of them."""
