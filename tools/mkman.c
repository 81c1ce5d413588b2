/* mkman.c -- Writes outbox-relay.conf(5) from the configuration table itself (config_key_describe), so the manual cannot drift from what the relay accepts. */
#include <stdio.h>
#include <string.h>

#include "config.h"

/* Text for a roff line: backslashes doubled, a leading dot or quote escaped. */
static void roff(FILE *f, const char *s) {
        if (*s == '.' || *s == '\'')
                fputs("\\&", f);
        for (; *s; s++) {
                if (*s == '\\')
                        fputs("\\e", f);
                else if (*s == '-')
                        fputs("\\-", f);
                else
                        fputc(*s, f);
        }
}

int main(int argc, char **argv) {
        const char *version = argc > 1 ? argv[1] : "";
        const char *etc = argc > 2 ? argv[2] : "/etc";
        const char *group = "";
        struct config_key_doc d;

        printf(".TH OUTBOX\\-RELAY.CONF 5 \"\" \"outbox-relay %s\" \"File Formats\"\n", version);
        puts(".SH NAME\noutbox\\-relay.conf \\- configuration of outbox\\-relay");
        fputs(".SH SYNOPSIS\n", stdout);
        roff(stdout, etc);
        puts("/outbox\\-relay/outbox\\-relay.conf");
        puts(".SH DESCRIPTION\n"
             "One libconfig file (groups in braces, settings as \\fBname = value;\\fR). Unknown groups and\n"
             "keys and values out of range are errors: \\fBoutbox\\-relay\\fR(8) says\n"
             "\\fIFILE\\fB:\\fILINE\\fB: \\fIgroup.key\\fB: \\fIwhat is wrong\\fR and exits with status 78.\n"
             "Durations are strings with a unit: \\fB\"250ms\"\\fR, \\fB\"30s\"\\fR, \\fB\"5m\"\\fR,\n"
             "\\fB\"2h\"\\fR, \\fB\"7d\"\\fR. SIGHUP reloads the file; a setting marked\n"
             "\\fIrestart\\fR below only takes effect after a restart, and an invalid file leaves the\n"
             "running settings in place. The commented sample installed as the default file lists\n"
             "every key with its default.\n"
             ".PP\n"
             "The group \\fBkafka\\fR passes librdkafka properties through, their dots written as\n"
             "underscores (\\fBlinger_ms = 20;\\fR for \\fIlinger.ms\\fR; \\fBlog_level\\fR is the one\n"
             "real underscore); \\fBbootstrap_servers\\fR is required. Properties that would break the\n"
             "relay's guarantees are refused (\\fIenable.idempotence\\fR off, \\fIacks\\fR other than\n"
             "all, a \\fIrandom\\fR partitioner, \\fItransactional.id\\fR, an unbounded\n"
             "\\fImessage.timeout.ms\\fR).");
        for (size_t i = 0; config_key_describe(i, &d) == 0; i++) {
                if (strcmp(group, d.group) != 0) {
                        group = d.group;
                        printf(".SH \"GROUP %s\"\n", group);
                }
                printf(".TP\n\\fB%s.%s\\fR (%s; default \\fB", d.group, d.name, d.type);
                roff(stdout, d.def);
                fputs("\\fR; ", stdout);
                roff(stdout, d.range);
                printf("; %s)\n", d.reloadable ? "reloadable" : "restart");
                roff(stdout, d.doc);
                putchar('\n');
        }
        fputs(".SH FILES\n.TP\n", stdout);
        roff(stdout, etc);
        fputs("/outbox\\-relay/outbox\\-relay.conf\nThe default file.\n.TP\n", stdout);
        roff(stdout, etc);
        puts("/outbox\\-relay/\\fINAME\\fR.conf\nThe file of instance \\fINAME\\fR of\n"
             "outbox\\-relay@.service.");
        puts(".SH SEE ALSO\n\\fBoutbox\\-relay\\fR(8)");
        return 0;
}
