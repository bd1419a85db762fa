"""Pages a person reads: ``report`` (one self-contained report of a run or a comparison), ``figures`` (its
matplotlib figures), ``audit`` (the oracle audit page and its answers), ``html`` (the one jinja2 environment of
``templates/``)."""
