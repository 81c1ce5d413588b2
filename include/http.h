/* http.h -- The HTTP listener (libmicrohttpd, its own thread): GET/HEAD of /health, /ready, /metrics; the answers come from a callback. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

enum http_page {
        HTTP_PAGE_HEALTH,
        HTTP_PAGE_READY,
        HTTP_PAGE_METRICS,
};

/* What a page answers: status, content type, and a heap body the server frees. */
struct http_reply {
        unsigned status;
        const char *content_type;
        char *body;
        size_t len;
};

/* Runs on the listener's thread: must only read what is safe to read from there. Returns 0 or
 * -errno (then the client gets 500). */
typedef int (*http_answer_fn)(void *arg, enum http_page page, struct http_reply *reply);

/* The routing rule, pure: 0 and *page for a known page asked with GET or HEAD; 405 for another
 * method on a known page; 404 for any other path (a query string is not part of the path). */
unsigned http_route(const char *method, const char *path, enum http_page *page);

/* "HOST:PORT" or "[IPV6]:PORT", numeric only (no name lookup at start), port 0..65535 (0: any
 * free port). Returns 0 or -EINVAL with why in err. Pure. */
int http_parse_listen(const char *listen, struct sockaddr_storage *sa, socklen_t *len, char *err,
                      size_t errsz);

struct http_server {
        struct MHD_Daemon *daemon;
        http_answer_fn answer;
        void *arg;
        char bound[80]; /* the address it listens on, with the port it got */
};

/* Listens on `listen` (checked by http_parse_listen) with at most `limit` connections, each
 * closed after `timeout_s` seconds without traffic. The thread it starts blocks every signal
 * (they belong to the relay's loop). Returns 0 or -errno with why in err. */
int http_start(struct http_server *s, const char *listen, unsigned limit, unsigned timeout_s,
               http_answer_fn answer, void *arg, char *err, size_t errsz);

/* Stops the thread and closes every connection. Accepts a server never started. */
void http_stop(struct http_server *s);
