{{/* The release's object names: the release name when it contains the chart name, else
"<release>-<chart>" (Helm's usual rule), at most 63 characters. */}}
{{- define "leasehold.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "leasehold.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "leasehold.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "leasehold.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Every object's labels: deploy/base's two (name, part-of) and Helm's. */}}
{{- define "leasehold.labels" -}}
app.kubernetes.io/name: {{ include "leasehold.name" . }}
app.kubernetes.io/part-of: leasehold
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The control-plane pods: deploy/base's selector, and the release (so that two releases in
one namespace do not select each other's pods). */}}
{{- define "leasehold.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leasehold.name" . }}
app.kubernetes.io/component: control-plane
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "leasehold.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The namespaces the control plane manages: rbac.managedNamespaces, and every cluster's
namespace and member_lease_namespace. Sorted, without duplicates, one per line. */}}
{{- define "leasehold.managedNamespaces" -}}
{{- $ns := list -}}
{{- range .Values.rbac.managedNamespaces -}}
{{- $ns = append $ns . -}}
{{- end -}}
{{- range .Values.config.clusters -}}
{{- $ns = append $ns .namespace -}}
{{- if .member_lease_namespace -}}
{{- $ns = append $ns .member_lease_namespace -}}
{{- end -}}
{{- end -}}
{{- range $ns | uniq | sortAlpha }}
{{ . }}
{{- end -}}
{{- end -}}

{{/* leasehold.yaml: config, with what the chart decides from the other values. */}}
{{- define "leasehold.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if eq .Values.database.type "sqlite" -}}
{{- $_ := set $cfg "database" "sqlite:/var/lib/leasehold/leasehold.db" -}}
{{- end -}}
{{- $_ := set $cfg "control_plane" (dict "namespace" .Release.Namespace "lease_name" .Values.controlPlane.leaseName "lease_duration" .Values.controlPlane.leaseDuration) -}}
{{- $http := default (dict) $cfg.http -}}
{{- $_ := set $http "listen" "0.0.0.0:8080" -}}
{{- $auth := default (dict) $http.auth -}}
{{- $_ := set $auth "mode" .Values.auth.mode -}}
{{- if eq .Values.auth.mode "token" -}}
{{- $_ := set $auth "token_file" "/etc/leasehold-tokens/tokens.csv" -}}
{{- $_ := set $auth "roles" .Values.auth.token.roles -}}
{{- end -}}
{{- $_ := set $http "auth" $auth -}}
{{- $_ := set $cfg "http" $http -}}
{{- toYaml $cfg -}}
{{- end -}}
