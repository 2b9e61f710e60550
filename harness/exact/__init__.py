"""Exact minimal adversarial distances of small ReLU networks, the ground truth of fidelity:
``encoding`` turns a zoo model into affine layers, ``solver`` solves the MILP per sample,
``command`` is the ``attackaudit exact`` command that writes them beside a run.
"""
