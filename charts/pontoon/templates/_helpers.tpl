{{/* The name of every object of the release. */}}
{{- define "pontoon.fullname" -}}
{{- if eq .Release.Name .Chart.Name -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pontoon.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pontoon.labels" -}}
{{ include "pontoon.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Leader election: asked for, or needed by more than one replica. */}}
{{- define "pontoon.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) -}}true{{- end -}}
{{- end -}}

{{/* A memory quantity (256Mi, 1Gi, 500M, bytes) in MiB, rounded down. */}}
{{- define "pontoon.memoryMiB" -}}
{{- $m := toString . -}}
{{- if hasSuffix "Gi" $m -}}{{ mul (trimSuffix "Gi" $m | int64) 1024 }}
{{- else if hasSuffix "Mi" $m -}}{{ trimSuffix "Mi" $m | int64 }}
{{- else if hasSuffix "Ki" $m -}}{{ div (trimSuffix "Ki" $m | int64) 1024 }}
{{- else if hasSuffix "G" $m -}}{{ div (mul (trimSuffix "G" $m | int64) 1000000000) 1048576 }}
{{- else if hasSuffix "M" $m -}}{{ div (mul (trimSuffix "M" $m | int64) 1000000) 1048576 }}
{{- else -}}{{ div ($m | int64) 1048576 }}
{{- end -}}
{{- end -}}

{{/* Refuses provider-call settings that cannot fit the operator's memory
limit: every call may use sandbox.memoryMiB, and the operator itself about
64 MiB (its RSS with 1000 routes is under 48 MiB). */}}
{{- define "pontoon.checkMemory" -}}
{{- with .Values.resources.limits -}}{{- with .memory -}}
{{- $limit := include "pontoon.memoryMiB" . | int64 -}}
{{- $calls := $.Values.sandbox.concurrentCalls | int64 -}}
{{- $each := $.Values.sandbox.memoryMiB | int64 -}}
{{- $need := add (mul $calls $each) 64 -}}
{{- if gt $need $limit -}}
{{- fail (printf "sandbox.concurrentCalls (%d) x sandbox.memoryMiB (%d) + 64 MiB for the operator is %d MiB, more than resources.limits.memory (%s): lower one of them, or raise the limit" $calls $each $need (toString .)) -}}
{{- end -}}
{{- end -}}{{- end -}}
{{- end -}}
