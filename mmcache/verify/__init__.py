"""Verifiers: a second opinion on a semantic candidate the threshold rule would serve.

One registry shape (:data:`VERIFIERS`, a :class:`mmcache.registry.Registry`: name -> factory;
:func:`make_verifier`); the built-in ``edits`` verifier (:mod:`mmcache.verify.edits`) is a
baseline written against the pair generator's own edits; ``pairs``
(:mod:`mmcache.verify.pair_model`) is learned from labelled pairs (``make verifier``); the opt-in
``judge`` verifier (:mod:`mmcache.verify.judge`) asks an OpenAI-compatible chat server.
"""

from mmcache.verify.base import VERIFIERS, Verifier, checked_probability, make_verifier

__all__ = [
    "VERIFIERS", "Verifier", "checked_probability", "make_verifier"]
