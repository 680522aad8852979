package cmd

import (
	"fmt"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	uzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// logOptions configure structured logging for every subcommand.
type logOptions struct {
	level  string
	format string
}

func (o *logOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.level, "log-level", "info", "Log level: debug, info, warn or error.")
	fs.StringVar(&o.format, "log-format", "json", "Log format: json (one object per line) or console (for people).")
}

// logger builds the logger the flags describe.
func (o *logOptions) logger() (logr.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(o.level)); err != nil {
		return logr.Discard(), fmt.Errorf("--log-level %q: want debug, info, warn or error", o.level)
	}
	var console bool
	switch o.format {
	case "json":
	case "console":
		console = true
	default:
		return logr.Discard(), fmt.Errorf("--log-format %q: want json or console", o.format)
	}
	return zap.New(
		zap.UseDevMode(false),
		zap.Level(uzap.NewAtomicLevelAt(lvl)),
		zap.ConsoleEncoder(func(c *zapcore.EncoderConfig) {}),
		func(opts *zap.Options) {
			if !console {
				opts.Encoder = zapcore.NewJSONEncoder(uzap.NewProductionEncoderConfig())
			}
			opts.StacktraceLevel = zapcore.PanicLevel
		},
	), nil
}
