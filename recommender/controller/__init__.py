"""The in-cluster controller: policy objects, the reconcile loop, leader election, and the actuator
with its guardrails. Decisions (``policy``, ``changes``, ``guardrails``) are pure; ``kube`` is the only
module that talks to the API server, used by ``actuator``, ``records``, ``leader``, ``mig`` and ``loop``;
``schedule`` runs the loop on an interval.
"""
