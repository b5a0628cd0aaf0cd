package contract_test

import (
	"io/fs"

	"github.com/foundryq/foundryq/events/schema"
)

func schemaFS() fs.FS { return schema.FS() }
