// The node agent (`dsrun agent`): one per host. It reads its node's plan from stdin, starts
// every local rank in its own process group, streams their output and exits back to the
// launcher on stdout (protocol.h), and tears all of them down on a rank failure, a Stop
// message, a signal, or when stdin closes because the launcher is gone. It exits only after
// every process it started, and every descendant reparented to it, has been reaped.
#pragma once

namespace dsrun {

// Runs the agent on fds 0 and 1; returns its exit status (0 unless the protocol broke).
int run_agent();

// `dsrun agent --listen --node N` (the fanout transports, agent_listen.cpp): prints a port and a
// one-time key on stdout, then runs the agent over the one TCP connection that presents the key.
int run_listening_agent(int node);
// `dsrun agent --listen --node-env VAR`: the same, node N read from the tool's rank variable (MPI's
// OMPI_COMM_WORLD_RANK or PMI_RANK, Slurm's SLURM_PROCID). Exits 1 naming VAR when it is not a number.
int run_listening_agent_from_env(const char* variable);

}  // namespace dsrun
