vcl 4.1;
# varnish PASS mode: every request forwarded to origin, nothing cached
backend origin { .host = "@ORIGIN_HOST@"; .port = "@ORIGIN_PORT@"; }
sub vcl_recv { return (pass); }
