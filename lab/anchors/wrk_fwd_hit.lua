-- wrk script: absolute-URI requests through a forward proxy; cacheable object (all hits after warm-up)
wrk.path = "http://@ORIGIN_HOST@:@ORIGIN_PORT@@PATH@"
wrk.headers["Host"] = "@ORIGIN_HOST@:@ORIGIN_PORT@"
