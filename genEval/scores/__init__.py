"""The statistics of genEval, one job per module (paper Sec. 3.3; docs/method.md, "The scores" and "Beyond the paper").

``outcomes`` the per-sample table every score is computed from; ``definitions`` every score, defined once;
``intervals`` Wilson / Clopper-Pearson and the one clustered bootstrap over source images; ``run_scores`` the
scores, per-class table and warnings of one run; ``rankings`` paired differences, ranks, Kendall tau and its
distribution; ``effective_robustness`` the baseline fit and ER; ``label_free`` SoftmaxCorr."""
