"""The control plane's concerns beside its command path and scheduling cycle
(`application.control_plane`): each module holds one, built on the pieces they all share
(`shared.Shared`: the state and its lock, the command path, the leader's bookkeeping)."""
