package io.stateops.json;

import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.objects.Invoke;
import org.apache.spark.sql.catalyst.json.JSONOptions;
import org.apache.spark.sql.catalyst.json.JacksonParser;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.FailureSafeParser;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.PermissiveMode$;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.ObjectType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.Iterator;
import scala.collection.immutable.Map;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A JSON line parsed exactly as Spark's JSON file source parses it, as a value of the line: Spark's own JacksonParser
 * and FailureSafeParser in PERMISSIVE mode, arrays read as rows (allowArrayAsStructs, as JsonFileFormat), handed the
 * line's bytes as the file source hands them (CreateJacksonParser.text: Jackson's byte-array parser).
 *
 * Why: the dead-letter query reads every line as text, to keep a bad line's exact bytes, beside the stateful query,
 * which reads the files with the JSON source. `from_json` parses through a java.io.InputStreamReader per row
 * (CreateJacksonParser.utf8String): about twice the time, and it judges invalid UTF-8, a leading byte-order mark and a
 * top-level array otherwise than the file source does (docs/spark-behaviour.md). Over the bytes, with the file
 * source's parser, the two queries judge every line alike by construction.
 *
 * The value is the array of rows the JSON source reads from the line: one for an object (its invalid fields null; a
 * row of nulls for a line that does not parse), one per element for an array, none for a blank line or `[]`. Used as
 * a Catalyst `Invoke` of `rows` on a literal of this object, as Spark's own JSON expressions do: `column(line, ddl)`.
 */
public final class LineParser implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final ArrayData EMPTY = new GenericArrayData(new Object[0]);

    private final StructType schema;
    private final String timeZone;
    private transient FailureSafeParser<UTF8String> parser;

    public LineParser(StructType schema, String timeZone) {
        this.schema = schema.asNullable();
        this.timeZone = timeZone;
    }

    /** The rows the JSON source reads from `line` (the class doc). */
    public ArrayData rows(UTF8String line) {
        if (parser == null) {
            parser = newParser();
        }
        Iterator<InternalRow> rows = parser.parse(line);
        if (!rows.hasNext()) {
            return EMPTY;
        }
        InternalRow first = rows.next().copy();  // FailureSafeParser reuses its row for a bad record
        if (!rows.hasNext()) {
            return new GenericArrayData(new Object[] {first});
        }
        List<Object> all = new ArrayList<>();
        all.add(first);
        while (rows.hasNext()) {
            all.add(rows.next().copy());
        }
        return new GenericArrayData(all.toArray());
    }

    private FailureSafeParser<UTF8String> newParser() {
        scala.collection.immutable.Map<String, String> options = new Map.Map1<>("mode", "PERMISSIVE");
        JSONOptions parsed = new JSONOptions(options, timeZone, "_corrupt_record");
        JacksonParser raw = new JacksonParser(schema, parsed, true, emptySeq());
        return new FailureSafeParser<>(
            line -> raw.parse(line, LineParser::overBytes, text -> text),
            PermissiveMode$.MODULE$, schema, parsed.columnNameOfCorruptRecord());
    }

    /**
     * A Jackson parser over the line's bytes, starting at index 0 of an array of its own, as the file source hands
     * Jackson a line (CreateJacksonParser.text: the Text buffer, from 0). Why from 0: for a string column holding a
     * non-string value (a number, a boolean, an object), Spark's parser copies the value's raw text out of the array
     * Jackson was given at the value's byte offset, and Jackson counts that offset from where it started parsing, not
     * from the array's start. A line at an offset inside a larger buffer (a text file's row) read another field's
     * bytes for `"user_id": 4242`; Kafka values, each its own array, read `4242` (docs/spark-behaviour.md).
     * `getBytes` returns the array itself when the line fills it, and a copy of the line otherwise.
     *
     * A line that is not valid UTF-8 gets a copy of Spark's factory, with a field-name cache of its own: Jackson looks
     * a name's raw bytes up in the factory's cache before it decodes them, and checks their UTF-8 only when it first
     * caches them, so a key of invalid UTF-8 whose bytes hit a name an earlier line of the same task cached was read
     * as a name and the line parsed, where alone Spark's reader refuses it (measured: the JSON source reads such a
     * line either way, by the lines before it in its file). Valid lines share the factory: a hit there is the name
     * itself. So every line reads as Spark's JSON reader reads it alone, whatever the batch around it, and only the
     * rare invalid line pays for a cache (a copy for every line took the parse from 1.08x to 1.94x the JSON source).
     */
    private static JsonParser overBytes(JsonFactory factory, UTF8String line) {
        try {
            byte[] bytes = line.getBytes();
            return (line.isValid() ? factory : factory.copy()).createParser(bytes, 0, bytes.length);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static <T> Seq<T> emptySeq() {
        return CollectionConverters.asScala(java.util.List.<T>of()).toSeq();
    }

    /**
     * The rows of `line` (a string column) parsed against `ddl` (a schema as DDL, as `from_json` takes it), with the
     * session's time zone (where `from_json` gets it).
     */
    public static Column column(Column line, String ddl) {
        LineParser parser = new LineParser(StructType.fromDDL(ddl), SQLConf.get().sessionLocalTimeZone());
        Expression target = Literal.create(parser, new ObjectType(LineParser.class));
        Seq<Expression> arguments = CollectionConverters.asScala(java.util.List.of(ExpressionUtils.expression(line)))
            .toSeq();
        Seq<AbstractDataType> inputTypes = CollectionConverters.asScala(
            java.util.List.<AbstractDataType>of(DataTypes.StringType)).toSeq();
        DataType rows = new ArrayType(parser.schema, true);
        return ExpressionUtils.column(new Invoke(target, "rows", rows, arguments, inputTypes, true, true, true));
    }
}
