"""Broken twin of vae_task: the KL term's sign flipped (``recon - KL``), as when -0.5 * sum(...) is written
twice negated: the objective now rewards a posterior far from the prior, and the loss has no lower bound."""

from tests.blind.vae_task import make

task = make(kl_sign=-1.0)
