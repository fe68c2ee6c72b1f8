#!/usr/bin/env bash
# Vendors the Kubernetes protobuf definitions that crates/kube-sim/src/protobuf.rs decodes request bodies with.
#
# Usage: scripts/vendor-proto.sh [VERSION]      (default v0.33.5; or set VERSION=...)
#
# Fetches k8s.io/api@$VERSION and k8s.io/apimachinery@$VERSION through the Go module proxy
# (`go mod download`), copies the generated.proto files listed below into crates/kube-sim/src/proto/ with
# comments and blank lines stripped, and writes crates/kube-sim/src/proto/go-json.txt: what the .proto files
# cannot say about the JSON form (which Go fields are pointers, lack `omitempty`, are inlined or
# renamed; which messages are top-level kinds or Go slice types), read from the Go struct tags
# of the same modules with go/ast (a stdlib-only Go program below; nothing is compiled from k8s).
set -euo pipefail

VERSION="${1:-${VERSION:-v0.33.5}}"

# "<module>:<package dir>:<vendored file name>"
FILES=(
  "k8s.io/apimachinery:pkg/runtime:runtime.proto"
  "k8s.io/apimachinery:pkg/runtime/schema:runtime-schema.proto"
  "k8s.io/apimachinery:pkg/util/intstr:intstr.proto"
  "k8s.io/apimachinery:pkg/api/resource:resource.proto"
  "k8s.io/apimachinery:pkg/apis/meta/v1:meta-v1.proto"
  "k8s.io/api:core/v1:core-v1.proto"
  "k8s.io/api:coordination/v1:coordination-v1.proto"
  "k8s.io/api:discovery/v1:discovery-v1.proto"
  "k8s.io/api:events/v1:events-v1.proto"
  "k8s.io/api:authentication/v1:authentication-v1.proto"
  "k8s.io/api:authorization/v1:authorization-v1.proto"
  "k8s.io/api:apps/v1:apps-v1.proto"
  "k8s.io/api:networking/v1:networking-v1.proto"
  "k8s.io/api:policy/v1:policy-v1.proto"
  "k8s.io/api:rbac/v1:rbac-v1.proto"
)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/crates/kube-sim/src/proto"

command -v go >/dev/null || { echo "vendor-proto: go is required" >&2; exit 1; }
command -v python3 >/dev/null || { echo "vendor-proto: python3 is required" >&2; exit 1; }

# `go mod download` needs a module context only for its cache; run it from a scratch dir.
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
moddir() {
  (cd "$SCRATCH" && GOFLAGS=-mod=mod go mod download -json "$1@$VERSION") \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["Dir"])'
}
declare -A DIRS
DIRS[k8s.io/api]="$(moddir k8s.io/api)"
DIRS[k8s.io/apimachinery]="$(moddir k8s.io/apimachinery)"

mkdir -p "$OUT"
rm -f "$OUT"/*.proto
GEN_ARGS=()
for entry in "${FILES[@]}"; do
  IFS=: read -r module pkg name <<<"$entry"
  src="${DIRS[$module]}/$pkg/generated.proto"
  [ -f "$src" ] || { echo "vendor-proto: $src not found" >&2; exit 1; }
  {
    echo "// $module@$VERSION $pkg/generated.proto (Copyright The Kubernetes Authors, Apache-2.0); comments stripped."
    # Drop the /* license */ block, whole-line // comments, and blank lines.
    sed -e '/^\/\*/,/\*\//d' -e '/^[[:space:]]*\/\//d' -e '/^[[:space:]]*$/d' -e 's/[[:space:]]*$//' "$src"
  } >"$OUT/$name"
  GEN_ARGS+=("$OUT/$name=${DIRS[$module]}/$pkg")
  printf '%-26s %7d bytes  (from %7d)\n' "$name" "$(wc -c <"$OUT/$name")" "$(wc -c <"$src")"
done

mkdir -p "$SCRATCH/gen"
cat >"$SCRATCH/gen/go.mod" <<'EOF'
module gojsonhints

go 1.22
EOF
cat >"$SCRATCH/gen/main.go" <<'EOF'
// Reads Go struct tags next to each generated.proto and prints what the JSON form needs beyond
// the .proto: see the header written below.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var (
	pkgRe   = regexp.MustCompile(`(?m)^package ([\w.]+);`)
	msgRe   = regexp.MustCompile(`(?m)^message (\w+) \{`)
	fieldRe = regexp.MustCompile(`^\s+(?:optional|repeated|required)?\s*[\w.<>, ]+?\s+(\w+)\s*=\s*(\d+)`)
)

type goType struct {
	fields  []*ast.Field
	isSlice bool
	isOther bool   // neither a struct nor a slice nor a defined copy of another package's type
	aliasOf string // `type List metav1.List`: the other package's type name
}

func main() {
	out := []string{
		"# Go JSON facts for the vendored .proto messages, from the Go struct tags (scripts/vendor-proto.sh).",
		"# <message> [T: embeds TypeMeta, a top-level kind] [L: Go slice type, JSON is its `items` array]",
		"#   then <field number><flags> for fields that differ from \"non-pointer, omitempty, JSON name = proto name\":",
		"#   p pointer; r no omitempty; i inlined (anonymous, no JSON name); x json:\"-\"; =NAME JSON name.",
	}
	var seen []map[string]goType
	for _, arg := range os.Args[1:] {
		protoPath, goDir, _ := strings.Cut(arg, "=")
		text, err := os.ReadFile(protoPath)
		check(err)
		pkg := pkgRe.FindSubmatch(text)
		if pkg == nil {
			fail("%s: no package", protoPath)
		}
		types := parseGo(goDir)
		for name, t := range types {
			if t.aliasOf == "" {
				continue
			}
			// A defined copy of a type of a package read earlier (meta/v1 comes first).
			for i := len(seen) - 1; i >= 0; i-- {
				if orig, ok := seen[i][t.aliasOf]; ok && orig.aliasOf == "" {
					types[name] = orig
					break
				}
			}
		}
		seen = append(seen, types)
		// message name -> field numbers declared in the .proto
		protoFields := map[string][]int{}
		var order []string
		current := ""
		for _, line := range strings.Split(string(text), "\n") {
			if m := msgRe.FindStringSubmatch(line); m != nil {
				current = m[1]
				order = append(order, current)
				protoFields[current] = nil
				continue
			}
			if line == "}" {
				current = ""
				continue
			}
			if m := fieldRe.FindStringSubmatch(line); m != nil && current != "" {
				n, _ := strconv.Atoi(m[2])
				protoFields[current] = append(protoFields[current], n)
			}
		}
		for _, msg := range order {
			t, ok := types[msg]
			if !ok || t.isOther || t.aliasOf != "" {
				fail("%s: message %s has no Go struct or slice type in %s", protoPath, msg, goDir)
			}
			var parts []string
			if t.isSlice {
				parts = append(parts, "L")
			}
			byNumber := map[int]string{}
			for _, f := range t.fields {
				if f.Tag == nil {
					continue
				}
				tagText, _ := strconv.Unquote(f.Tag.Value)
				tag := reflect.StructTag(tagText)
				jsonName, jsonOpts, _ := strings.Cut(tag.Get("json"), ",")
				pb := tag.Get("protobuf")
				if pb == "" || pb == "-" {
					if len(f.Names) == 0 && typeName(f.Type) == "TypeMeta" && jsonName == "" {
						parts = append(parts, "T")
					}
					continue
				}
				pbParts := strings.Split(pb, ",")
				n, err := strconv.Atoi(pbParts[1])
				check(err)
				protoName := ""
				for _, p := range pbParts {
					if v, ok := strings.CutPrefix(p, "name="); ok {
						protoName = v
					}
				}
				flags := ""
				if _, ok := f.Type.(*ast.StarExpr); ok {
					flags += "p"
				}
				omit := false
				for _, o := range strings.Split(jsonOpts, ",") {
					omit = omit || o == "omitempty"
				}
				switch {
				case jsonName == "-":
					flags += "x"
				case jsonName == "" && len(f.Names) == 0:
					flags += "i"
				default:
					if !omit {
						flags += "r"
					}
					if jsonName == "" {
						jsonName = f.Names[0].Name
					}
					if jsonName != protoName {
						flags += "=" + jsonName
					}
				}
				byNumber[n] = flags
			}
			if len(byNumber) == 0 {
				// A hand-written proto type (resource.Quantity, metav1.Time): the decoder knows it.
				if len(parts) > 0 {
					out = append(out, string(pkg[1])+"."+msg+" "+strings.Join(parts, " "))
				}
				continue
			}
			var numbers []int
			for _, n := range protoFields[msg] {
				flags, ok := byNumber[n]
				if !ok {
					fail("%s: %s field %d has no Go field", protoPath, msg, n)
				}
				if flags != "" {
					numbers = append(numbers, n)
				}
			}
			sort.Ints(numbers)
			for _, n := range numbers {
				parts = append(parts, fmt.Sprintf("%d%s", n, byNumber[n]))
			}
			if len(parts) > 0 {
				out = append(out, string(pkg[1])+"."+msg+" "+strings.Join(parts, " "))
			}
		}
	}
	fmt.Println(strings.Join(out, "\n"))
}

func parseGo(dir string) map[string]goType {
	types := map[string]goType{}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	check(err)
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		check(err)
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				switch t := ts.Type.(type) {
				case *ast.StructType:
					types[ts.Name.Name] = goType{fields: t.Fields.List}
				case *ast.ArrayType:
					types[ts.Name.Name] = goType{isSlice: t.Len == nil, isOther: t.Len != nil}
				case *ast.SelectorExpr:
					types[ts.Name.Name] = goType{aliasOf: t.Sel.Name}
				default:
					types[ts.Name.Name] = goType{isOther: true}
				}
			}
		}
	}
	return types
}

func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.StarExpr:
		return typeName(t.X)
	}
	return ""
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "vendor-proto: "+format+"\n", args...)
	os.Exit(1)
}
EOF
(cd "$SCRATCH/gen" && GOFLAGS= go run . "${GEN_ARGS[@]}") >"$OUT/go-json.txt"
printf '%-26s %7d bytes\n' go-json.txt "$(wc -c <"$OUT/go-json.txt")"

cat >"$OUT/README.md" <<EOF
Comment-stripped copies of the \`generated.proto\` files of \`k8s.io/api@$VERSION\` and \`k8s.io/apimachinery@$VERSION\` (Apache-2.0, © The Kubernetes Authors), loaded by \`crates/kube-sim/src/protobuf.rs\`.
\`go-json.txt\` holds the Go JSON facts the .proto files lack (pointers, omitempty, inlining), read from the same modules' Go struct tags; \`test-vectors.json\` (kept by the script, used by the tests) holds bodies made by the Go protobuf serializer or sent by kubectl v1.32, each with the JSON Go decodes it to.
Regenerate with \`scripts/vendor-proto.sh [VERSION]\` (needs go and python3); a new file must also be listed in \`crates/kube-sim/src/protobuf.rs\`.
EOF
