{{/*
Checks across values that values.schema.json cannot express clearly. They
mirror what `tollgate gateway` would refuse at start-up (dataplane/redisconf),
so a bad combination fails at install time with a readable message instead of
a crash-looping pod. Included once, from gateway-deployment.yaml.
*/}}
{{- define "tollgate.validate" -}}
{{- if and .Values.controller.regions.rebalance (not .Values.controller.regions.redis) }}
{{- fail "controller.regions.redis must name each region's Redis (region: host:port) when controller.regions.rebalance is true" }}
{{- end }}
{{- $r := .Values.redis }}
{{- if and (eq $r.mode "standalone") (ne (len $r.addrs) 1) }}
{{- fail (printf "redis.addrs: standalone mode takes exactly one address, got %d (use redis.mode sentinel or cluster for several)" (len $r.addrs)) }}
{{- end }}
{{- if and (eq $r.mode "sentinel") (not $r.masterName) }}
{{- fail "redis.masterName is required when redis.mode is sentinel" }}
{{- end }}
{{- if and (ne $r.mode "sentinel") (or $r.sentinel.username $r.sentinel.existingSecret) }}
{{- fail "redis.sentinel.username and redis.sentinel.existingSecret need redis.mode: sentinel" }}
{{- end }}
{{- if and (eq $r.mode "cluster") (ne (int $r.db) 0) }}
{{- fail "redis.db must be 0 when redis.mode is cluster" }}
{{- end }}
{{- if and (or $r.tls.caSecret $r.tls.serverName) (not $r.tls.enabled) }}
{{- fail "redis.tls.caSecret and redis.tls.serverName need redis.tls.enabled: true" }}
{{- end }}
{{- $methods := splitList "," .Values.gateway.identity }}
{{- if and (not (has "mapped" $methods)) .Values.gateway.apiKeys.existingSecret }}
{{- fail "gateway.apiKeys.existingSecret needs gateway.identity: mapped (with header-is-tenant the X-Api-Key value is the tenant id and no key is looked up)" }}
{{- end }}
{{- $jwt := .Values.gateway.jwt }}
{{- if has "jwt" $methods }}
{{- if not (and $jwt.issuer $jwt.audiences $jwt.tenantClaim) }}
{{- fail "gateway.identity jwt needs gateway.jwt.issuer, gateway.jwt.audiences and gateway.jwt.tenantClaim" }}
{{- end }}
{{- if and $jwt.jwks.url $jwt.jwks.existingSecret }}
{{- fail "gateway.jwt.jwks.url and gateway.jwt.jwks.existingSecret exclude each other (neither: the keys are discovered from gateway.jwt.issuer)" }}
{{- end }}
{{- else if or $jwt.issuer $jwt.jwks.url $jwt.jwks.existingSecret }}
{{- fail "gateway.jwt needs jwt in gateway.identity (e.g. mapped,jwt)" }}
{{- end }}
{{- if and .Values.gatewayAPI.enabled .Values.gateway.routes }}
{{- fail "gateway.routes must be empty with gatewayAPI.enabled: routes then come from HTTPRoutes" }}
{{- end }}
{{- if and .Values.gatewayAPI.enabled (not .Values.controller.enabled) }}
{{- fail "gatewayAPI.enabled needs controller.enabled: the controller compiles the HTTPRoutes" }}
{{- end }}
{{- $a := .Values.gateway.autoscaling }}
{{- if $a.enabled }}
{{- if gt (int $a.minReplicas) (int $a.maxReplicas) }}
{{- fail "gateway.autoscaling.minReplicas must not exceed gateway.autoscaling.maxReplicas" }}
{{- end }}
{{- if not (or $a.targetCPUUtilizationPercentage $a.targetMemoryUtilizationPercentage) }}
{{- fail "gateway.autoscaling needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage" }}
{{- end }}
{{- end }}
{{- $ids := dict }}
{{- range $i, $route := .Values.gateway.routes }}
{{- if hasKey $ids $route.id }}
{{- fail (printf "gateway.routes[%d]: id %q is already used by another route" $i $route.id) }}
{{- end }}
{{- $_ := set $ids $route.id true }}
{{- if and $route.stripPrefix (not $route.pathPrefix) }}
{{- fail (printf "gateway.routes[%d] (%s): stripPrefix needs pathPrefix" $i $route.id) }}
{{- end }}
{{- end }}
{{- if and .Values.gateway.rls.tls.clientCASecret (not .Values.gateway.rls.tls.existingSecret) }}
{{- fail "gateway.rls.tls.clientCASecret needs gateway.rls.tls.existingSecret (the server certificate)" }}
{{- end }}
{{- $domains := dict }}
{{- range $i, $d := .Values.gateway.rls.domains }}
{{- if hasKey $domains $d.name }}
{{- fail (printf "gateway.rls.domains[%d]: name %q is listed twice" $i $d.name) }}
{{- end }}
{{- $_ := set $domains $d.name true }}
{{- if eq (default "tenant" $d.tenantKey) (default "route" $d.routeKey) }}
{{- fail (printf "gateway.rls.domains[%d] (%s): tenantKey and routeKey must differ" $i $d.name) }}
{{- end }}
{{- end }}
{{- end }}
