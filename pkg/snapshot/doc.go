// Package snapshot owns the compiled rule snapshot: the format the controller
// publishes into ConfigMaps and the gateway loads. Both sides import it; no
// other package knows how a shard is laid out. (The gateway's store of the
// loaded snapshot and its sources are dataplane/rules; the HTTP route table
// is dataplane/routes.)
//
// A snapshot is split into Count shards by a hash of the tenant, so that no
// ConfigMap nears the API server's object size limit at 100,000+ rules and a
// change to one tenant's rules rewrites one shard. Every shard stands alone: it
// carries its index, the shard count, a version and a checksum, and decodes
// without the others. Rules with the wildcard tenant live in the shard of "*".
//
// A shard is stored in ConfigMap <prefix>-<index>-of-<count> as gzip-compressed
// JSON in binaryData, with labels that let readers select all shards of one
// snapshot.
package snapshot
