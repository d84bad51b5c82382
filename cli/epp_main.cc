// epp: the Endpoint Picker under the reference EPP's command line, for container images whose
// manifests or Helm values were written for GIE's or llm-d's EPP: `epp --pool-name=... --v=2`
// runs what `eppctl serve` runs (docs/serve.md, "The reference's command line").
#include "commands/serve.h"

int main(int argc, char** argv) { return eppctl::RunEppMain(argc, argv); }
