/* fuzz_input.c -- libFuzzer harness: the small parsers of outside text: conninfo checks and redaction, http.listen, HTTP routing, /proc stat lines. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "conninfo.h"
#include "http.h"
#include "procstat.h"

/* The first byte picks the parser, the rest is its text. Each must answer for any text: no
 * crash, no read past the string, and a redacted conninfo never longer than its buffer. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *s, buf[256], msg[512];
        struct sockaddr_storage sa;
        socklen_t len;
        enum http_page page;
        struct metrics_process p;

        if (size < 1)
                return 0;
        s = malloc(size);
        if (!s)
                abort();
        memcpy(s, data + 1, size - 1);
        s[size - 1] = 0;
        switch (data[0] % 4) {
        case 0:
                (void)conninfo_check(s, msg, sizeof(msg));
                if (strlen(conninfo_redact(s, buf, sizeof(buf))) >= sizeof(buf))
                        abort();
                break;
        case 1:
                if (http_parse_listen(s, &sa, &len, msg, sizeof(msg)) == 0 && len > sizeof(sa))
                        abort();
                break;
        case 2: {
                /* "METHOD PATH" */
                char *sp = strchr(s, ' ');
                unsigned code;

                if (!sp)
                        break;
                *sp = 0;
                code = http_route(s, sp + 1, &page);
                if (code != 0 && code != 404 && code != 405)
                        abort();
                break;
        }
        default:
                (void)procstat_parse(s, 100, 4096, &p);
                break;
        }
        free(s);
        return 0;
}
