{{/*
Names, labels and the pieces every workload shares.
*/}}

{{/* Chart name, or nameOverride. */}}
{{- define "tollgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fullname: the release name when it already contains the chart name, else
<release>-<chart>. Trimmed to leave room for the suffixes below
(-controller-metrics is the longest, 19 characters).
*/}}
{{- define "tollgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 44 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* name-version, for the helm.sh/chart label. */}}
{{- define "tollgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object names of each role. */}}
{{- define "tollgate.gateway.name" -}}
{{- printf "%s-gateway" (include "tollgate.fullname" .) }}
{{- end }}
{{- /* HTTPS listeners are served: Gateway API mode with an HTTPS port. */}}
{{- define "tollgate.gatewayHTTPS" -}}
{{- if and .Values.gatewayAPI.enabled (gt (int .Values.gateway.service.httpsPort) 0) }}true{{- end }}
{{- end }}
{{- define "tollgate.controller.name" -}}
{{- printf "%s-controller" (include "tollgate.fullname" .) }}
{{- end }}

{{/*
The rule snapshot: the controller writes ConfigMaps <name>-<i>-of-<n> labelled
ratelimit.tollgate.dev/snapshot=<name>; the gateways read them.
*/}}
{{- define "tollgate.snapshotName" -}}
{{- printf "%s-rules" (include "tollgate.fullname" .) }}
{{- end }}

{{/*
Standard labels. Call with (dict "ctx" $ "component" "gateway").
*/}}
{{- define "tollgate.labels" -}}
helm.sh/chart: {{ include "tollgate.chart" .ctx }}
{{ include "tollgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: tollgate
{{- end }}

{{/*
Selector labels: stable for the life of a release (Deployment selectors are
immutable). Call with (dict "ctx" $ "component" "gateway").
*/}}
{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tollgate.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The image of both roles; the tag defaults to the chart's appVersion. */}}
{{- define "tollgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Pod security context of every workload: the image's nonroot user (65532),
the runtime's default seccomp profile. fsGroup makes mounted Secrets (mode
0440) readable by that user. Together with the container context below this
satisfies the "restricted" Pod Security Standard.
*/}}
{{- define "tollgate.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Container security context of every container. */}}
{{- define "tollgate.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop:
  - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
Mount paths of the gateway's files. Directories, not subPath mounts, so that
ConfigMap and Secret updates reach the files and the gateway reloads them.
*/}}
{{- define "tollgate.gateway.routesDir" -}}/etc/tollgate/routes{{- end }}
{{- define "tollgate.gateway.apiKeysDir" -}}/etc/tollgate/api-keys{{- end }}
{{- define "tollgate.gateway.adminTokenDir" -}}/etc/tollgate/admin-token{{- end }}
{{- define "tollgate.gateway.redisPasswordDir" -}}/etc/tollgate/redis-password{{- end }}
{{- define "tollgate.gateway.sentinelPasswordDir" -}}/etc/tollgate/redis-sentinel-password{{- end }}
{{- define "tollgate.gateway.redisCADir" -}}/etc/tollgate/redis-tls{{- end }}
