/* fuzz_fabric: Slurm topology.conf text into fabric_parse. Any input must give
 * either a fabric whose tree queries are consistent or a FILE:LINE error. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192) return 0; /* real files are a few KB; bigger inputs only slow the search */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    fabric *f;
    char err[256];
    if (fabric_parse(&f, text, "fuzz.conf", err, sizeof err) == 0) {
        int n = fabric_num_switches(f);
        for (int a = 0; a < n && a < 64; a++) {
            if (fabric_switch_index(f, fabric_switch_name(f, a)) != a) abort();
            for (int b = 0; b < n && b < 64; b++) {
                int d = fabric_distance(f, a, b), e = fabric_distance(f, b, a);
                if (d != e || (a == b && d != 0)) abort();
                int l = fabric_lca(f, a, b);
                if (l >= 0 && (fabric_depth(f, l) > fabric_depth(f, a) || fabric_depth(f, l) > fabric_depth(f, b))) abort();
            }
        }
        fabric_leaf_of(f, "node000");
        fabric_free(f);
    } else if (!strstr(err, "fuzz.conf")) {
        abort(); /* every refusal names the file */
    }
    free(text);
    return 0;
}
