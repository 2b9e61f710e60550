"""Exact minimal adversarial distances of small ReLU networks, the ground truth of fidelity:
``encoding`` turns a zoo model into affine layers, ``solver`` solves each sample (MILP by HiGHS
for L∞, L1 and L0; ``miqp``: L2's MIQP by SCIP), ``cache`` computes each answer once (the shipped
tables first), ``defaults`` writes them at the end of every run of a model that admits them, and
``command`` is the ``attackaudit exact`` command that writes them beside a run.
"""
