package limiter

// RedisGone reports whether err says Redis is not there: the connection
// could not be made, or Redis closed it. Other callers of Redis (the
// concurrency slots) use it to tell an outage from a slow call.
func RedisGone(err error) bool { return redisGone(err) }
