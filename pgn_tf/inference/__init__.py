"""Summarizing: raw text in, summary out, by a model dir's model in process or by an export.

    import pgn_tf
    s = pgn_tf.Summarizer.from_model_dir("runs/pgn")       # or .from_saved_model("export/pgn/3")
    s(["article one ...", "article two ..."])              # -> ["summary one", "summary two"]
    s.explain("article ...")   # -> {summary, tokens, source_tokens, attention [T, L], p_gen [T]}

One concept a module:
  loading.py      a model dir's model and config (with its tuned ABS+ weights), or an export
  batching.py     which articles share a model call, and the batch sizes one is traced for
  api.py          SummarizerAPI: what both summarizers answer (s(...), decode, explain)
  summarizer.py   Summarizer: the in-graph decode (tokenize -> search -> words), compiled
  saved_model.py  SavedModelSummarizer: the same calls over an export's signatures
  evaluator.py    the one decode-and-score path (evaluate, the pipeline's bless, tune,
                  validation ROUGE, the studies), and the sources evaluate scores: a model
                  dir, an export, a baseline, a decoded file
  tuning.py       ABS+ feature weights by coordinate ascent, written into the model dir
  corpus.py       a file of articles summarized into a file of summaries, resumably
The search itself is built from the config and a per-call request in one place:
pgn_tf.decoding.search (`Search.from_params`).
"""
