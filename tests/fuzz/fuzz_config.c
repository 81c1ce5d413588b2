/* fuzz_config.c -- libFuzzer harness: a whole configuration file through the loader, the librdkafka pass-through guard and the reload rule. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <limits.h>

#include "config.h"
#include "kafka_guard.h"

/* The input is the file: written to relay.conf in a private directory and loaded by that path,
 * as the relay loads its -c FILE (an @include then resolves in that directory, where nothing
 * else lies). Whatever it says must end in 0 or one "FILE:LINE: …" error, never a crash, an
 * exit, a hang, a leak or undefined behaviour; a file that loads must also survive the
 * producer's configuration and a reload against the defaults. */
static char path[PATH_MAX], dir[] = "/tmp/outbox-relay-fuzz-XXXXXX";

/* The file and its directory go when the fuzzer exits (each run left one behind). */
static void remove_dir(void) {
        unlink(path);
        rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct relay_config c, running;
        char err[1024], changed[512];
        FILE *f;

        if (!path[0]) {
                if (!mkdtemp(dir))
                        abort();
                snprintf(path, sizeof(path), "%s/relay.conf", dir);
                atexit(remove_dir);
        }
        f = fopen(path, "we");
        if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
                abort();
        memset(&c, 0, sizeof(c));
        err[0] = 0;
        if (config_load(path, &c, err, sizeof(err)) == 0) {
                rd_kafka_conf_t *k = config_kafka_conf(&c, err, sizeof(err));

                if (k)
                        rd_kafka_conf_destroy(k);
                if (config_defaults(&running) == 0) {
                        config_keep_restart_only(&running, &c, changed, sizeof(changed));
                        config_free(&running);
                }
                config_free(&c);
        } else if (strncmp(err, path, strlen(path)) != 0 || err[strlen(path)] != ':') {
                /* every refusal says which file, then where and what */
                abort();
        }
        return 0;
}
