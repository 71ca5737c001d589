"""Services: long-running workloads with replicas (model servers), beside jobs.

`model` holds the values, `commands` the replicated commands, `table` applies them,
`reconcile` decides what the leader does next, `engines` fills in engine command lines and
`codec` turns it all into JSON-able records.
"""
