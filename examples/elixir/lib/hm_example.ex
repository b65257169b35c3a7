defmodule HmExample do
  @moduledoc """
  Creates an eventually consistent table on this node, writes to it and deletes from it
  under `:hypermnesia.async_ec/1`, reads it back and prints what it found, then checks
  that the facade's documentation is there for `h :hypermnesia.async_ec`.
  """

  def main do
    # `mix run` has started hypermnesia (a dependency) but not Mnesia (included only), so
    # the schema can go on disc. A fresh directory under _build on every run.
    dir = System.get_env("HM_EXAMPLE_MNESIA_DIR", "_build/mnesia")
    File.rm_rf!(dir)
    :ok = :application.set_env(:mnesia, :dir, String.to_charlist(dir))
    IO.puts("hm_example: Mnesia running before the schema: #{:mnesia.system_info(:is_running)}")
    :ok = :mnesia.create_schema([node()]) |> schema_ok()
    :ok = :mnesia.start()

    {:atomic, :ok} =
      :hypermnesia.create_table(:student,
        type: :pawset,
        attributes: [:id, :name],
        disc_copies: [node()]
      )

    :ok = :hypermnesia.async_ec(fn -> :mnesia.write({:student, 1, "Ada"}) end)
    :ok = :hypermnesia.async_ec(fn -> :mnesia.write({:student, 2, "Grace"}) end)
    :ok = :hypermnesia.async_ec(fn -> :mnesia.delete({:student, 2}) end)

    rows =
      :hypermnesia.async_ec(fn -> :mnesia.match_object({:student, :_, :_}) end)
      |> Enum.sort()

    IO.puts("hm_example: rows #{inspect(rows)}")
    IO.puts("hm_example: ec type #{inspect(elem(:hypermnesia.ec_options(:student), 1).type)}")

    {:docs_v1, _, :erlang, _, _, _, docs} = Code.fetch_docs(:hypermnesia)
    documented = for {{:function, :async_ec, 1}, _, _, %{"en" => _}, _} <- docs, do: true
    IO.puts("hm_example: async_ec documented #{documented == [true]}")

    disc = :mnesia.table_info(:schema, :storage_type) == :disc_copies
    IO.puts("hm_example: schema on disc #{disc}")

    if rows == [{:student, 1, "Ada"}] and documented == [true] and disc do
      IO.puts("hm_example: ok")
    else
      IO.puts("hm_example: FAILED")
      System.halt(1)
    end
  end

  defp schema_ok(:ok), do: :ok
  defp schema_ok({:error, {_, {:already_exists, _}}}), do: :ok
end
