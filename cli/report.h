// `dsrun report [--format text|json]`, like DeepSpeed's ds_report: the launcher's version, libssh and
// the cluster tools it can start jobs through, then the runtime's own report (`dsworker --report`,
// the dsworker next to this dsrun), so one command shows what a machine offers a job.
#pragma once

namespace dsrun {

// argv as main's, argv[1] == "report". Prints, then runs dsworker's report in this process (exec);
// returns only on an error (exit status).
int run_report(int argc, char** argv);

}  // namespace dsrun
