/* proxy.h -- A TCP proxy on loopback that a test can cut and restore: one relay's database link fails while the server and the other relays go on. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct ts_proxy;

/* Listens on 127.0.0.1 (a free port) and forwards every connection to 127.0.0.1:target_port,
 * each on its own thread. Fails the test on error. */
struct ts_proxy *ts_proxy_start(int target_port);
/* The port it listens on. */
int ts_proxy_port(const struct ts_proxy *p);
/* Cuts the link: every forwarded connection is reset on both sides (the server's backend sees its
 * client vanish, so its transaction and locks go), and new connections are refused until restored. */
void ts_proxy_cut(struct ts_proxy *p);
void ts_proxy_restore(struct ts_proxy *p);
/* Connections forwarded so far. */
int ts_proxy_accepted(const struct ts_proxy *p);
/* Stops it, closing everything. NULL is fine. */
void ts_proxy_stop(struct ts_proxy *p);
