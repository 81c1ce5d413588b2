/* http.c -- The HTTP listener (libmicrohttpd, its own thread): GET/HEAD of /health, /ready, /metrics; the answers come from a callback. */
#include "http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Why libmicrohttpd's own thread rather than polling it from the loop: the loop waits inside
 * libpq and librdkafka calls for as long as a slow database or broker takes (bounded by the
 * batch deadline, not by a slice), and /health must answer exactly then. The thread only copies
 * the figures under a mutex held for a memcpy; it never touches the loop's connections. */

unsigned http_route(const char *method, const char *path, enum http_page *page) {
        static const struct {
                const char *path;
                enum http_page page;
        } pages[] = {
                { "/health", HTTP_PAGE_HEALTH },
                { "/ready", HTTP_PAGE_READY },
                { "/metrics", HTTP_PAGE_METRICS },
        };
        size_t n = strcspn(path, "?");

        for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
                if (strlen(pages[i].path) != n || strncmp(pages[i].path, path, n) != 0)
                        continue;
                if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
                        return 405;
                *page = pages[i].page;
                return 0;
        }
        return 404;
}

int http_parse_listen(const char *listen, struct sockaddr_storage *sa, socklen_t *len, char *err,
                      size_t errsz) {
        char host[64];
        const char *colon, *h = listen;
        size_t hl;
        char *end;
        long port;

        memset(sa, 0, sizeof(*sa));
        if (listen[0] == '[') {
                const char *close = strchr(listen, ']');

                if (!close || close[1] != ':') {
                        snprintf(err, errsz, "an IPv6 address is written \"[ADDRESS]:PORT\"");
                        return -EINVAL;
                }
                h = listen + 1;
                hl = (size_t)(close - h);
                colon = close + 1;
        } else {
                colon = strrchr(listen, ':');
                if (!colon) {
                        snprintf(err, errsz, "expected \"ADDRESS:PORT\" (or \"\" to turn HTTP off)");
                        return -EINVAL;
                }
                hl = (size_t)(colon - listen);
        }
        errno = 0;
        port = strtol(colon + 1, &end, 10);
        if (!isdigit((unsigned char)colon[1]) || *end || errno || port < 0 || port > 65535) {
                snprintf(err, errsz, "the port must be a number from 0 to 65535");
                return -EINVAL;
        }
        if (hl == 0 || hl >= sizeof(host)) {
                snprintf(err, errsz, "expected a numeric address before the port");
                return -EINVAL;
        }
        memcpy(host, h, hl);
        host[hl] = 0;
        if (listen[0] == '[') {
                struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)sa;

                if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1) {
                        snprintf(err, errsz, "'%s' is not a numeric IPv6 address", host);
                        return -EINVAL;
                }
                a6->sin6_family = AF_INET6;
                a6->sin6_port = htons((uint16_t)port);
                *len = sizeof(*a6);
        } else {
                struct sockaddr_in *a4 = (struct sockaddr_in *)sa;

                if (inet_pton(AF_INET, host, &a4->sin_addr) != 1) {
                        snprintf(err, errsz,
                                 "'%s' is not a numeric IPv4 address (no names: nothing is looked up)", host);
                        return -EINVAL;
                }
                a4->sin_family = AF_INET;
                a4->sin_port = htons((uint16_t)port);
                *len = sizeof(*a4);
        }
        return 0;
}

static enum MHD_Result send_reply(struct MHD_Connection *c, unsigned status, const char *type, char *body,
                                  size_t len, const char *allow) {
        struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        enum MHD_Result ret;

        if (!r) {
                free(body);
                return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        if (allow)
                MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
        ret = MHD_queue_response(c, status, r);
        MHD_destroy_response(r);
        return ret;
}

static enum MHD_Result plain(struct MHD_Connection *c, unsigned status, const char *text, const char *allow) {
        char *body = strdup(text);

        if (!body)
                return MHD_NO;
        return send_reply(c, status, "text/plain; charset=utf-8", body, strlen(body), allow);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
        struct http_server *s = cls;
        struct http_reply reply = { 0 };
        enum http_page page;
        unsigned code;

        (void)version;
        (void)upload_data;
        (void)upload_data_size;
        (void)con_cls;
        code = http_route(method, url, &page);
        if (code == 405)
                return plain(c, 405, "method not allowed: only GET and HEAD\n", "GET, HEAD");
        if (code == 404)
                return plain(c, 404, "not found: /health, /ready, /metrics\n", NULL);
        if (s->answer(s->arg, page, &reply) < 0) {
                free(reply.body);
                return plain(c, 500, "out of memory\n", NULL);
        }
        return send_reply(c, reply.status, reply.content_type, reply.body, reply.len, NULL);
}

int http_start(struct http_server *s, const char *listen, unsigned limit, unsigned timeout_s,
               http_answer_fn answer, void *arg, char *err, size_t errsz) {
        struct sockaddr_storage sa;
        socklen_t len;
        sigset_t all, old;
        const union MHD_DaemonInfo *info;
        char host[INET6_ADDRSTRLEN] = "?";
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
        int ret;

        memset(s, 0, sizeof(*s));
        ret = http_parse_listen(listen, &sa, &len, err, errsz);
        if (ret < 0)
                return ret;
        if (sa.ss_family == AF_INET6)
                flags |= MHD_USE_IPv6;
        s->answer = answer;
        s->arg = arg;
        /* The thread inherits this mask: signals go to the loop, whose poll() they interrupt. */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        errno = 0;
        s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                                     (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, limit,
                                     MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
                                     MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(32 * 1024), MHD_OPTION_END);
        ret = errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (!s->daemon) {
                snprintf(err, errsz, "cannot listen on %s: %s", listen,
                         ret ? strerror(ret) : "the HTTP server did not start");
                return -(ret ? ret : EIO);
        }
        info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
        if (sa.ss_family == AF_INET6) {
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, host, sizeof(host));
                snprintf(s->bound, sizeof(s->bound), "[%s]:%u", host, info ? info->port : 0);
        } else {
                inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, host, sizeof(host));
                snprintf(s->bound, sizeof(s->bound), "%s:%u", host, info ? info->port : 0);
        }
        return 0;
}

void http_stop(struct http_server *s) {
        if (s->daemon)
                MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
}
