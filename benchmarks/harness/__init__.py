"""What the benchmark scripts share (run from benchmarks/, which puts this folder's parent on sys.path)."""
