"""The conformance suite: every option of the generator, oracle and classifier config groups, built as a user's
config builds it (with small random stand-ins where real weights are absent) and checked against the written
contract of genEval.interfaces: its protocol, the type of every hook it has (HOOKS), what its declaration says
before it is built, and its role's tensors (a decoder differentiable in the latent and inside [0, 1], a judgement's
shapes and dtypes, logits differentiable in the images). After timm's tests/test_models.py: one parametrised test
per property, over every registered option. `python -m pytest tests/contracts`."""
