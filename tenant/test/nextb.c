/* libnextb.so (test only): the next who() after libnexta.so's. */
const char *who(void) { return "b"; }
